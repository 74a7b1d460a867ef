"""SIGKILL a worker in the middle of a chat's turn, after the model asked for a tool and before
the tool ran: the turn is carried on by the next worker, the tool runs once, the model is not
asked again for the call it answered, and the ledger shows every model call with its cost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from remit.agent import Chats
from remit.app import load_app
from remit.client import Client
from remit.core.settings import Settings
from tests.processes import Workers

pytestmark = pytest.mark.crash

CHAT_APP = Path(__file__).resolve().parents[1] / "apps" / "chat_app"


@pytest.fixture
def crash(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(
        database_url,
        tmp_path,
        app=CHAT_APP,
        CHAT_TOOL_JOURNAL=str(tmp_path / "tools.jsonl"),
        REMIT_FAKE_LLM_RECORD=str(tmp_path / "model.jsonl"),
    )
    yield workers
    workers.close()


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_a_turn_killed_before_its_tool_runs_runs_the_tool_once_and_asks_the_model_no_more(
    crash: Workers, database_url: str
) -> None:
    settings = Settings.from_env(CHAT_APP, environ={"REMIT_DATABASE_URL": database_url})
    with Client(load_app(CHAT_APP), settings) as client:
        chats = Chats(client)
        chat = chats.open(by="user:ops")
        crash.hold_at("stock_count")
        turn = chats.say(chat.id, "how many mugs do we have?", by="user:ops")

        crash.kill_when_reached(crash.start(), "stock_count")
        assert len(_lines(crash.tmp / "model.jsonl")) == 1  # the model asked for the tool
        assert _lines(crash.tmp / "tools.jsonl") == []  # and the tool had not run
        assert chats.get(chat.id, by="user:ops").chat.status == "thinking"

        crash.start()
        crash.wait_finished(turn)
        view = chats.wait(chat.id, by="user:ops", timeout=60)

        assert view.chat.status == "idle"
        assert [(m.role, m.text) for m in view.messages] == [
            ("user", "how many mugs do we have?"),
            ("tool", "stock_count(sku=mug)"),
            ("assistant", "The warehouse holds 42 of mug."),
        ]
        assert [t["sku"] for t in _lines(crash.tmp / "tools.jsonl")] == ["mug"]
        asked = _lines(crash.tmp / "model.jsonl")
        assert len(asked) == 2  # once before the kill, once with the tool's answer
        assert asked[1]["messages"][-1]["role"] == "tool"
        calls = client.calls.ledger(turn)
        assert [(row.op_id, row.status) for row in calls] == [("llm.chat.complete", "ok")] * 2
        assert all(row.cost is not None and row.cost > 0 for row in calls)
