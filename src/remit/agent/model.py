"""The operator agent's model, for Pydantic AI: each request is a call of `llm.chat.complete`.

Pydantic AI runs the agent's loop (the model asks for tools, the tools answer, the model goes
on); `RemitModel` is the one way that loop reaches a model. It turns the loop's messages into
the op's chat request (with the tools the model may call) and the op's reply back into the loop's
response, and makes the call through the run's `ctx`: a checkpointed step, in the ledger,
reserved against the budgets before it is made and settled at its cost, redacted as every call
is. A turn carried on after its worker died answers a finished call from its record.

Which models the agent can use is the `llm` connector's price table (`DEFAULT_PRICES` and
`App(llm_prices=...)`): a model the table prices and an OpenAI-compatible API serves, that can
call tools.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from remit.connectors.llm import ChatMessage, ChatReply, ChatRequest, ToolCall, ToolSpec

Complete = Callable[[ChatRequest], Awaitable[ChatReply]]


class RemitModel(Model):
    """A Pydantic AI model whose every request is `complete(request)`: in a run, `ctx.call` of
    `llm.chat.complete` for the model `engine`, at most `max_tokens` a reply."""

    def __init__(self, engine: str, complete: Complete, *, max_tokens: int = 1024) -> None:
        super().__init__()
        self.engine = engine
        self.complete = complete
        self.max_tokens = max_tokens

    @property
    def model_name(self) -> str:
        return self.engine

    @property
    def system(self) -> str:
        return "remit-llm"

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        request = chat_request(self.engine, messages, model_request_parameters, self.max_tokens)
        reply = await self.complete(request)
        return model_response(reply)


def chat_request(
    engine: str,
    messages: list[ModelMessage],
    parameters: ModelRequestParameters,
    max_tokens: int,
) -> ChatRequest:
    """The chat request that asks `engine` to go on from `messages`, with the loop's tools."""
    wire: list[ChatMessage] = []
    instructions = _instructions(messages, parameters)
    if instructions:
        wire.append(ChatMessage(role="system", content=instructions))
    for message in messages:
        if isinstance(message, ModelRequest):
            wire.extend(_request_parts(message))
        else:
            wire.append(_response_message(message))
    tools = [
        ToolSpec(
            name=tool.name,
            description=tool.description or "",
            parameters=dict(tool.parameters_json_schema),
        )
        for tool in [*parameters.function_tools, *parameters.output_tools]
    ]
    return ChatRequest(model=engine, messages=wire, max_tokens=max_tokens, tools=tools)


def model_response(reply: ChatReply) -> ModelResponse:
    """The loop's response for the op's reply."""
    parts: list[Any] = []
    if reply.content:
        parts.append(TextPart(content=reply.content))
    seen: set[str] = set()
    for n, call in enumerate(reply.tool_calls):
        # A vendor may leave a call's id out, or give two calls one id: each needs its own, for
        # its answer to name.
        call_id = call.id if call.id and call.id not in seen else f"{call.id or 'call'}_{n}"
        seen.add(call_id)
        parts.append(ToolCallPart(call.name, _arguments(call.arguments), tool_call_id=call_id))
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens),
        model_name=reply.model,
    )


def _instructions(messages: list[ModelMessage], parameters: ModelRequestParameters) -> str:
    parts = parameters.instruction_parts
    if parts:
        return "\n\n".join(part.content for part in parts if part.content)
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.instructions:
            return message.instructions
    return ""


def _request_parts(message: ModelRequest) -> list[ChatMessage]:
    wire: list[ChatMessage] = []
    for part in message.parts:
        kind = part.part_kind
        if kind == "system-prompt":
            wire.append(ChatMessage(role="system", content=str(getattr(part, "content", ""))))
        elif kind == "user-prompt":
            wire.append(ChatMessage(role="user", content=_text(getattr(part, "content", ""))))
        elif kind == "tool-return":
            wire.append(
                ChatMessage(
                    role="tool",
                    content=part.model_response_str(),  # type: ignore[union-attr]
                    tool_call_id=part.tool_call_id,  # type: ignore[union-attr]
                )
            )
        elif kind in ("retry-prompt", "retry-feedback"):
            said = part.model_response()  # type: ignore[union-attr]
            call_id = getattr(part, "tool_call_id", None)
            if getattr(part, "tool_name", None) and call_id:
                wire.append(ChatMessage(role="tool", content=said, tool_call_id=call_id))
            else:
                wire.append(ChatMessage(role="user", content=said))
    return wire


def _response_message(message: ModelResponse) -> ChatMessage:
    text: list[str] = []
    calls: list[ToolCall] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            text.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(
                ToolCall(
                    id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_json_str()
                )
            )
    return ChatMessage(role="assistant", content="".join(text), tool_calls=calls)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(item for item in content if isinstance(item, str))


def _arguments(arguments: str) -> str | dict[str, Any]:
    """The model's arguments as the loop takes them: parsed when they are a JSON object, else
    as written (the loop asks the model to try again)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return parsed if isinstance(parsed, dict) else arguments
