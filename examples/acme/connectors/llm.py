"""The models Acme's workflows and its operator agent ask: remit's `llm` connector (the
OpenAI-compatible chat-completions API, `LLM_API_KEY`), whose fake answers the operator agent
from the script in `operator.py`, so that the demo's questions get their answers on fakes."""

from __future__ import annotations

import os

from remit.connectors.base import Connector
from remit.connectors.llm import FakeLLM, LLMDriver, chat_complete

from .operator import respond


def _fake() -> FakeLLM:
    # REMIT_FAKE_LLM_RECORD: a file every request the fake answers is appended to (tests read
    # it to count the model's calls across a worker that was killed).
    return FakeLLM(respond=respond, record=os.environ.get("REMIT_FAKE_LLM_RECORD") or None)


llm = Connector(
    "llm",
    ops=[chat_complete],
    driver=LLMDriver,
    fake=_fake,
    description="Chat completions over the OpenAI-compatible API, billed to Acme's budget.",
)
