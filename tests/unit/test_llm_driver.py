"""The LLM driver against a real HTTP server on localhost speaking the chat-completions API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from remit import ChatReply, DriverError, MissingCredential
from remit.connectors.base import CallContext
from remit.connectors.llm import (
    DEFAULT_PRICES,
    ChatCost,
    ChatMessage,
    ChatRequest,
    LLMDriver,
    ToolCall,
    ToolSpec,
    chat_complete,
)

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Dear customer, please pay."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28},
}


@dataclass
class Vendor:
    """What the server answers next (status, JSON body), and what it was asked."""

    answers: list[tuple[int, Any]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def vendor() -> Iterator[Vendor]:
    state = Vendor()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            state.seen.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": json.loads(self.rfile.read(length)),
                }
            )
            status, body = state.answers.pop(0) if state.answers else (200, COMPLETION)
            raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def call(environ: dict[str, str]) -> CallContext:
    return CallContext(
        op=chat_complete,
        idempotency_key="run_1:3",
        run_id="run_1",
        attempt=1,
        actor="user:test",
        environ=environ,
    )


ASKED = ChatRequest(
    model="gpt-4o-mini",
    messages=[
        {"role": "system", "content": "You write payment reminders."},
        {"role": "user", "content": "Invoice inv_1001 is 40 days late."},
    ],
    max_tokens=200,
    temperature=0.2,
)


def complete(vendor: Vendor, asked: ChatRequest = ASKED) -> ChatReply:
    reply = LLMDriver().complete(asked, call({"LLM_BASE_URL": vendor.url, "LLM_API_KEY": "sk-t"}))
    assert isinstance(reply, ChatReply)
    return reply


def test_the_driver_posts_a_chat_completion_and_reads_its_usage(vendor: Vendor) -> None:
    reply = complete(vendor)

    [request] = vendor.seen
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-t"
    assert request["body"] == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You write payment reminders."},
            {"role": "user", "content": "Invoice inv_1001 is 40 days late."},
        ],
        "max_tokens": 200,
        "temperature": 0.2,
    }
    assert reply == ChatReply(
        content="Dear customer, please pay.",
        model="gpt-4o-mini-2024-07-18",
        input_tokens=21,
        output_tokens=7,
        finish_reason="stop",
    )
    # Priced as asked (the dated name the vendor answers with is not in the table).
    cost = ChatCost().actual_cost(ASKED, reply, DEFAULT_PRICES)
    assert cost == (21 * Decimal("0.15") + 7 * Decimal("0.60")) / 1_000_000


def test_a_reply_without_usage_is_counted_at_its_most(vendor: Vendor) -> None:
    vendor.answers.append((200, {**COMPLETION, "usage": None}))
    reply = complete(vendor)
    cost = ChatCost()
    assert cost.actual_cost(ASKED, reply, DEFAULT_PRICES) == cost.max_cost(ASKED, DEFAULT_PRICES)


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False)]
)
def test_an_error_answer_says_whether_trying_again_can_help(
    vendor: Vendor, status: int, retryable: bool
) -> None:
    vendor.answers.append(
        (status, {"error": {"message": "slow down" if status == 429 else "no", "code": "c42"}})
    )
    with pytest.raises(DriverError) as failed:
        complete(vendor)
    error = failed.value
    assert (error.status, error.retryable, error.vendor_code) == (status, retryable, "c42")
    assert f"LLM API answered {status}" in str(error)
    assert error.maybe_applied is (status >= 500)


def test_a_body_that_is_not_a_completion_is_not_retried(vendor: Vendor) -> None:
    vendor.answers.append((200, "<html>proxy error</html>"))
    with pytest.raises(DriverError, match="not a chat completion") as failed:
        complete(vendor)
    assert failed.value.retryable is False


def test_no_server_is_retryable_and_was_not_applied() -> None:
    environ = {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "sk-t"}
    with pytest.raises(DriverError, match="unreachable") as failed:
        LLMDriver(timeout=2).complete(ASKED, call(environ))
    assert (failed.value.retryable, failed.value.maybe_applied) == (True, False)


def test_a_missing_key_names_the_credential(vendor: Vendor) -> None:
    with pytest.raises(MissingCredential, match="LLM_API_KEY"):
        LLMDriver().complete(ASKED, call({"LLM_BASE_URL": vendor.url}))
    assert vendor.seen == []


def test_tools_go_on_the_wire_and_the_calls_the_model_asks_for_come_back(vendor: Vendor) -> None:
    called = {
        **COMPLETION,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "show_run", "arguments": '{"run_id": "run_1"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    vendor.answers.append((200, called))
    asked = ChatRequest(
        model="gpt-4o-mini",
        messages=[
            ChatMessage(role="user", content="why does run_1 wait?"),
            ChatMessage(
                role="assistant",
                tool_calls=[ToolCall(id="call_8", name="find_runs", arguments="{}")],
            ),
            ChatMessage(role="tool", content='[{"run_id": "run_1"}]', tool_call_id="call_8"),
        ],
        tools=[ToolSpec(name="show_run", description="One run.", parameters=SCHEMA)],
    )

    reply = complete(vendor, asked)

    body = vendor.seen[0]["body"]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "show_run", "description": "One run.", "parameters": SCHEMA},
        }
    ]
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_8",
                "type": "function",
                "function": {"name": "find_runs", "arguments": "{}"},
            }
        ],
    }
    assert body["messages"][2] == {
        "role": "tool",
        "content": '[{"run_id": "run_1"}]',
        "tool_call_id": "call_8",
    }
    assert (reply.content, reply.finish_reason) == ("", "tool_calls")
    assert reply.tool_calls == [
        ToolCall(id="call_9", name="show_run", arguments='{"run_id": "run_1"}')
    ]


SCHEMA = {"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}
