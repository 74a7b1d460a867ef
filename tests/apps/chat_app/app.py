"""An app for killing a worker in the middle of a chat's turn.

Its operator agent has one tool of the app's own, `stock_count`, which holds before it reads
when `<CRASH_HOLD_DIR>/hold-stock_count` exists (the worker writes `reached-stock_count` and
waits to be killed there) and appends each read it makes to `CHAT_TOOL_JOURNAL`. The fake model
asks for that tool, then answers with what it said; every request it answers is appended to
`REMIT_FAKE_LLM_RECORD`, so the test counts the model's calls across the killed worker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from remit import App, Connector, OperatorAgent
from remit.agent.tools import Reads
from remit.connectors.llm import ChatRequest, FakeLLM, FakeReply, LLMDriver, ToolCall, chat_complete


def hold(point: str) -> None:
    folder = os.environ.get("CRASH_HOLD_DIR")
    if not folder or not (Path(folder) / f"hold-{point}").exists():
        return
    (Path(folder) / f"reached-{point}").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)


def stock_count(reads: Reads, sku: str) -> dict[str, Any]:
    """How many of `sku` the warehouse holds."""
    hold("stock_count")
    with open(os.environ["CHAT_TOOL_JOURNAL"], "a") as journal:
        journal.write(json.dumps({"sku": sku, "pid": os.getpid()}) + "\n")
    return {"sku": sku, "count": 42}


def respond(request: ChatRequest) -> FakeReply:
    last = request.messages[-1]
    if last.role == "user":
        return FakeReply(
            tool_calls=[ToolCall(id="call_1", name="stock_count", arguments='{"sku": "mug"}')]
        )
    counted = json.loads(last.content)
    return FakeReply(f"The warehouse holds {counted['count']} of {counted['sku']}.")


llm = Connector(
    "llm",
    ops=[chat_complete],
    driver=LLMDriver,
    fake=lambda: FakeLLM(respond=respond, record=os.environ["REMIT_FAKE_LLM_RECORD"]),
)

app = App(
    name="chat-app",
    workflows=[],
    connectors=[llm],
    llm_prices={"fake": ("1.00", "2.00")},
    agent=OperatorAgent(model="fake", tools=[stock_count]),
)
