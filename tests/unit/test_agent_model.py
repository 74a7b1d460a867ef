"""The operator agent's model: Pydantic AI's messages as a chat request of `llm.chat.complete`,
and the op's reply as the loop's response."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from remit.agent.model import chat_request, model_response
from remit.connectors.llm import ChatMessage, ChatReply, ToolCall, ToolSpec

ACME = Path(__file__).resolve().parents[2] / "examples" / "acme"


def test_the_loops_messages_become_one_chat_request_with_its_tools() -> None:
    messages = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("why?")]),
        ModelResponse(
            parts=[
                TextPart("Looking."),
                ToolCallPart("show_run", {"run_id": "r1"}, tool_call_id="c1"),
            ]
        ),
        ModelRequest(parts=[ToolReturnPart("show_run", {"status": "waiting"}, tool_call_id="c1")]),
    ]
    tool = ToolDefinition(
        name="show_run", description="One run.", parameters_json_schema={"type": "object"}
    )

    asked = chat_request("fake", messages, ModelRequestParameters(function_tools=[tool]), 300)

    assert asked.model == "fake"
    assert asked.max_tokens == 300
    assert asked.messages == [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="why?"),
        ChatMessage(
            role="assistant",
            content="Looking.",
            tool_calls=[ToolCall(id="c1", name="show_run", arguments='{"run_id":"r1"}')],
        ),
        ChatMessage(role="tool", content='{"status":"waiting"}', tool_call_id="c1"),
    ]
    assert asked.tools == [
        ToolSpec(name="show_run", description="One run.", parameters={"type": "object"})
    ]


def test_a_reply_becomes_the_loops_response_each_call_with_an_id_of_its_own() -> None:
    reply = ChatReply(
        content="Two reads.",
        model="fake",
        tool_calls=[
            ToolCall(id="call_1", name="find_runs", arguments="{}"),
            ToolCall(id="call_1", name="show_run", arguments='{"run_id": "r1"}'),
            ToolCall(id="", name="ledger", arguments="not json"),
        ],
        input_tokens=10,
        output_tokens=4,
    )

    response = model_response(reply)

    text, *calls = response.parts
    assert text == TextPart("Two reads.")
    assert [(c.tool_name, c.tool_call_id, c.args) for c in calls] == [
        ("find_runs", "call_1", {}),
        ("show_run", "call_1_1", {"run_id": "r1"}),
        ("ledger", "call_2", "not json"),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 4)


def test_loading_an_app_with_an_agent_loads_no_agent_library() -> None:
    # Pydantic AI takes seconds to import: only a worker running a turn pays for it.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from remit.app import load_app; load_app(sys.argv[1]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic_ai', 'pydantic_graph'}))",
            str(ACME),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
