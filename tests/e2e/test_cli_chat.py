"""`remit chat ask`, `remit chat show`, `remit chats` and the interactive `remit chat`, as a person
runs them: on the example desk's database with a worker running the agent's turns (its scripted
model), and through `remit serve` (`REMIT_URL`) as a token's principal, both databases. carol,
a controller, asks why ann's write-off of inv_1003 waits, has the agent draft its approval at
400, reads the draft and then confirms it (never in the command that asked for it: that is
refused, nothing sent); the write-off run goes on to done."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from remit.agent.models import Chat, ChatMessage, ChatView
from remit.agent.store import ChatStore
from tests.chat_support import (
    ANN,
    APPROVE,
    BLIND_NO,
    BLIND_YES,
    CAROL,
    DRAFT_ACT,
    DRAFT_AMOUNT,
    GONE_DRAFT,
    NO_DRAFT,
    STALE_DRAFT,
    UNNAMED_YES,
    WAITS_FOR,
    WHY,
    WRITE_OFF,
    WRITE_OFF_INPUT,
)
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """`remit` on the example desk, its fakes in the test's own folder."""
    cli.env["REMIT_FAKES_DIR"] = str(cli.tmp / "fakes")
    return cli


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def started_write_off(cli: Cli) -> tuple[str, str]:
    """ann's write-off of inv_1003, waiting at its approval: (run id, approval id)."""
    given = json.dumps(WRITE_OFF_INPUT)
    run_id = cli("start", WRITE_OFF, "--input", given, "--as", ANN).stdout.strip()
    [approval_id] = cli.pending_approvals(run_id)
    return run_id, approval_id


def test_carol_asks_and_confirms_from_the_command_line(cli: Cli) -> None:
    cli.worker()
    run_id, approval_id = started_write_off(cli)
    assert cli("chats", "--as", CAROL).stdout.strip() == "no chats"

    # One message to a new chat: the agent's reads, then its answer naming the gate.
    asked = lines(cli("chat", "ask", "--new", WHY, "--as", CAROL).stdout)
    assert asked[0].startswith("chat chat_")
    chat_id = asked[0].split()[1]
    reads = [line for line in asked if line.startswith("  read: ")]
    assert reads, asked
    answers = [line for line in asked if line.startswith("agent: ")]
    assert approval_id in answers[-1], asked
    assert WAITS_FOR in answers[-1], asked
    assert not any(line.startswith("draft: ") for line in asked)

    # Without a chat's id the message goes on in the person's latest chat: the agent drafts
    # the decision, and nothing is done until it is confirmed. The draft is printed with its id.
    drafted = lines(cli("chat", "ask", APPROVE, "--as", CAROL).stdout)
    assert drafted[0] == f"chat {chat_id}"
    [draft] = [line for line in drafted if line.startswith("draft: ")]
    draft_id = draft.split()[1]
    assert draft_id.startswith("drf_")
    assert approval_id in draft
    at = drafted.index(draft)
    act, args = drafted[at + 1].strip().split(" ", 1)
    assert act == DRAFT_ACT
    assert json.loads(args)["approval_id"] == approval_id
    assert json.loads(args)["edit"]["amount"] == DRAFT_AMOUNT
    assert drafted[-1] == (
        f"  `remit chat ask {chat_id} --yes --draft {draft_id}` confirms it, --no discards it"
    )
    cli.wait_for(run_id, "waiting")

    # --yes (or --no) in the command that asks is refused before anything is sent: the person
    # has not read the draft it would make. The chat is as it was, its draft kept.
    before = cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout
    for flag, says in (("--yes", BLIND_YES), ("--no", BLIND_NO)):
        blind = cli("chat", "ask", APPROVE, flag, "--as", CAROL, check=False)
        assert blind.returncode == 1, blind
        assert says in blind.stderr
        assert blind.stdout == ""
        blind = cli("chat", "ask", chat_id, APPROVE, flag, "--as", CAROL, check=False)
        assert blind.returncode == 1, blind
        assert says in blind.stderr
    assert cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout == before
    # A draft named that is not the chat's: refused, nothing done.
    stale = cli("chat", "ask", chat_id, "--yes", "--draft", GONE_DRAFT, "--as", CAROL, check=False)
    assert stale.returncode == 1, stale
    assert STALE_DRAFT in stale.stderr
    assert cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout == before
    cli.wait_for(run_id, "waiting")

    listed = lines(cli("chats", "--as", CAROL).stdout)
    assert listed[0].split() == ["chat", "status", "title", "draft", "owner", "updated"]
    assert listed[1].split()[:2] == [chat_id, "idle"]
    assert CAROL in listed[1]
    assert [line.split()[0] for line in listed[1:] if line.startswith(" chat_")] == [chat_id]

    # `--yes` names the draft read: without --draft it is refused, nothing done, and the error
    # says where the whole command is (the hint under the draft).
    unnamed = cli("chat", "ask", "--yes", "--as", CAROL, check=False)
    assert unnamed.returncode == 1, unnamed
    assert UNNAMED_YES in unnamed.stderr
    assert "copy the hint line" in unnamed.stderr
    assert cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout == before

    # Once read, `--yes --draft` confirms it (here in the latest chat, no id given): the act is
    # printed, the run goes on.
    confirmed = lines(cli("chat", "ask", "--yes", "--draft", draft_id, "--as", CAROL).stdout)
    assert confirmed[0] == f"chat {chat_id}"
    assert f"draft: {draft_id} " in "\n".join(confirmed)
    [act_line] = [line for line in confirmed if line.startswith("act: ")]
    assert approval_id in act_line
    cli.wait_for(run_id, "done")
    again = cli("chat", "ask", chat_id, "--no", "--as", CAROL)
    assert "no draft: the agent proposes nothing to confirm" in again.stdout
    # The draft confirmed, named again, is settled: refused, not done twice.
    twice = cli("chat", "ask", chat_id, "--yes", "--draft", draft_id, "--as", CAROL, check=False)
    assert twice.returncode == 1, twice
    assert NO_DRAFT in twice.stderr

    # An act confirmed that fails (a drafted start of a workflow the app does not have): its
    # `act` message printed, then exit 1.
    failing = {
        "id": "drf_0123456789abcdef",
        "tool_call_id": "call_failing",
        "act": "start",
        "args": {"workflow": "no.such", "input": {}},
        "summary": "Start no.such",
        "sandbox_ok": True,
    }
    assert ChatStore(cli.db, "acme").update(chat_id, draft=failing)
    failed = cli(
        "chat", "ask", chat_id, "--yes", "--draft", failing["id"], "--as", CAROL, check=False
    )
    assert failed.returncode == 1, failed
    assert "act: Failed: " in failed.stdout
    assert "the act was not done (failed)" in failed.stderr
    assert "no.such" in failed.stderr

    shown = cli("chat", "show", chat_id, "--as", CAROL).stdout
    assert shown.startswith(f"chat {chat_id}")
    assert f"you: {WHY}" in shown
    assert f"you: {APPROVE}" in shown
    assert act_line in shown
    view = ChatView.model_validate(
        json.loads(cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout)
    )
    assert view.chat.id == chat_id
    assert view.messages[0].role == "user"
    [done] = [m for m in view.messages if m.role == "act" and m.data["outcome"] == "done"]
    assert done.data["draft_id"] == draft_id
    assert view.messages[-1].data["outcome"] == "failed"
    [listed_json] = json.loads(cli("chats", "--json", "--as", CAROL).stdout)
    assert Chat.model_validate(listed_json).id == chat_id

    # ann may not read carol's chat: refused, with the policies' reason.
    refused = cli("chat", "show", chat_id, "--as", ANN, check=False)
    assert refused.returncode == 1
    assert "user:ann may not" in refused.stderr
    missing = cli("chat", "show", "chat_000000000000", "--as", CAROL, check=False)
    assert missing.returncode == 1
    assert "chat_000000000000" in missing.stderr


def test_the_interactive_chat_asks_before_it_acts(cli: Cli) -> None:
    cli.worker()
    run_id, approval_id = started_write_off(cli)
    # Two questions, then `y` to the draft, then an empty line to end.
    typed = f"{WHY}\n{APPROVE}\ny\n\n"
    talked = cli("chat", "--as", CAROL, stdin=typed).stdout
    assert talked.startswith("chat chat_")
    assert "you> " in talked
    assert WAITS_FOR in talked
    assert "draft: " in talked
    assert "Confirm? [y/N/t=try in sandbox] " in talked
    assert approval_id in talked.split("Confirm?", 1)[1]
    # What `y` confirmed is the draft shown.
    chat_id = talked.split()[1].rstrip(":")
    [shown] = re.findall(r"^draft: (drf_\w+) ", talked, re.M)
    view = ChatView.model_validate(
        json.loads(cli("chat", "show", chat_id, "--json", "--as", CAROL).stdout)
    )
    [act] = [m for m in view.messages if m.role == "act"]
    assert (act.data["outcome"], act.data["draft_id"]) == ("done", shown)
    cli.wait_for(run_id, "done")

    # A draft answered N is discarded, and nothing is done.
    other, _ = started_write_off(cli)
    talked = cli("chat", "--new", "--as", CAROL, stdin=f"{WHY}\n{APPROVE}\nn\n").stdout
    assert "act: Discarded" in talked
    cli.wait_for(other, "waiting")

    # Ctrl-D at the question leaves the draft alone and ends; a message the room refuses (too
    # long) is said, and the chat goes on.
    talked = cli("chat", "--new", "--as", CAROL, stdin=f"{'x' * 8001}\n{WHY}\n{APPROVE}\n").stdout
    assert "is 8,001 characters" in talked
    assert WAITS_FOR in talked
    assert "the draft stays: `remit chat ask chat_" in talked
    kept = talked.split()[1].rstrip(":")
    view = ChatView.model_validate(
        json.loads(cli("chat", "show", kept, "--json", "--as", CAROL).stdout)
    )
    assert view.chat.draft is not None
    assert not [m for m in view.messages if m.role == "act"]
    cli.wait_for(other, "waiting")

    # sam, an admin, reads carol's chat but may not confirm its draft: the reason is printed,
    # the draft stays.
    talked = cli("chat", kept, "--as", "user:sam", stdin="y\n\n").stdout
    assert "refused: user:sam may not" in talked
    assert "the draft stays" in talked
    shown = ChatView.model_validate(
        json.loads(cli("chat", "show", kept, "--json", "--as", CAROL).stdout)
    )
    assert shown.chat.draft == view.chat.draft

    # A chat whose turn goes is followed before the next message is asked for.
    assert ChatStore(cli.db, "acme").update(kept, status="thinking", turn=None)
    talked = cli("chat", kept, "--timeout", "1", "--as", CAROL, stdin="hello\n").stdout
    assert "the agent is thinking" in talked
    assert "still thinking after 1 s" in talked
    assert "you> " not in talked


def test_ask_through_remit_serve_as_the_tokens_principal(cli: Cli, tmp_path: Path) -> None:
    carol = cli("tokens", "create", "--for", CAROL, "--as", "user:sam").stdout.strip()
    cli.spawn("serve", "--worker", "--port", "0")
    away = tmp_path / "away"
    away.mkdir()
    server = Remote(_listening(cli, 0), away)
    run_id, approval_id = started_write_off(cli)

    asked = server("chat", "ask", "--new", WHY, "--json", token=carol).stdout
    turn = json.loads(asked)
    assert set(turn) == {"run_id", "chat", "messages"}
    chat = Chat.model_validate(turn["chat"])
    said = [ChatMessage.model_validate(each) for each in turn["messages"]]
    assert chat.owner == CAROL
    assert said[0].role == "user"
    assert said[-1].role == "assistant"
    assert approval_id in said[-1].text

    # Asking and confirming in one command is refused, nothing sent; the draft is read first,
    # then confirmed by its id.
    blind = server("chat", "ask", chat.id, APPROVE, "--yes", "--json", token=carol, check=False)
    assert blind.returncode == 1, blind
    assert BLIND_YES in blind.stderr
    assert len(
        json.loads(server("chat", "show", chat.id, "--json", token=carol).stdout)["messages"]
    ) == len(turn["messages"])
    # --quiet prints the draft's id alone, for a script to confirm once read.
    draft_id = server("chat", "ask", chat.id, APPROVE, "--quiet", token=carol).stdout.strip()
    assert re.fullmatch(r"drf_\w+", draft_id), draft_id
    drafted = json.loads(server("chat", "show", chat.id, "--json", token=carol).stdout)
    assert drafted["chat"]["draft"]["id"] == draft_id
    assert not [m for m in drafted["messages"] if m["role"] == "act"]
    unnamed = server("chat", "ask", chat.id, "--yes", token=carol, check=False)
    assert unnamed.returncode == 1, unnamed
    assert UNNAMED_YES in unnamed.stderr
    stale = server("chat", "ask", chat.id, "--yes", "--draft", GONE_DRAFT, token=carol, check=False)
    assert stale.returncode == 1, stale
    assert STALE_DRAFT in stale.stderr
    confirmed = json.loads(
        server("chat", "ask", chat.id, "--yes", "--draft", draft_id, "--json", token=carol).stdout
    )
    acts = [m for m in confirmed["messages"] if m["role"] == "act"]
    assert [m["data"]["outcome"] for m in acts] == ["done"]
    assert acts[0]["data"]["args"]["approval_id"] == approval_id
    assert acts[0]["data"]["draft_id"] == draft_id
    cli.wait_for(run_id, "done")

    # Through the API only the token's principal acts, and the same chats are listed.
    as_other = server("chat", "show", chat.id, "--as", ANN, token=carol, check=False)
    assert as_other.returncode == 1
    assert "acts as the principal of its API token" in as_other.stderr
    assert server("chats", token=carol).stdout == cli("chats", "--as", CAROL).stdout
    missing = server("chat", "show", "chat_000000000000", token=carol, check=False)
    assert missing.returncode == 1
    assert "chat_000000000000" in missing.stderr
