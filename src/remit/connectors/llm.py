"""The `llm` connector: chat completions over the OpenAI-compatible HTTP API, billed to budgets.

One op, `llm.chat.complete`: a model, messages, `max_tokens` (the reply's most), an optional
temperature and the tools the model may call in; the reply's text and tool calls, the model that
answered, the tokens counted each way, why it stopped, and what it cost out. It is a read: it changes nothing at the vendor, so it is safe to
call again, and its tries are retried like any read's. Every call is billed, though, so a call
the ledger has already recorded is answered from the ledger rather than made again, and a call
reserves its most before it is made and settles at its cost after (see `budgets.py`).

Cost comes from the app's price table, USD per million tokens by model
(`App(llm_prices={"my-model": Price(input="0.50", output="1.50")})` over `DEFAULT_PRICES`). A
model the table lacks is refused before the call. The most a call can cost is its prompt's
bound (every token is at least one byte of text, plus each message's framing) at the input
price, plus `max_tokens` at the output price: a bound, not a guess, so settled spend cannot
pass a limit on a miscount. It settles at the vendor's counts (`usage`) at the same prices.

The driver (`LLMDriver`) POSTs to `{LLM_BASE_URL}/chat/completions` (default OpenAI's) with
`Authorization: Bearer {LLM_API_KEY}`; both come from the environment or `remit secrets`. The
fake (`FakeLLM`) answers from a script or a function of the request, then by echoing the last
user message.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from remit.connectors.base import CallContext, Connector, Driver, Fake, implements
from remit.core.errors import DriverError, OpError
from remit.declare.costs import Price
from remit.declare.ops import op

if TYPE_CHECKING:
    # httpx is imported where the live driver calls the API: an app that declares the connector
    # loads it only when a call is made.
    import httpx

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# USD per million tokens. Vendors change their prices: check yours, and override or extend the
# table with `App(llm_prices=...)`. `fake` is the price of the fake's default model.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input="2.50", output="10.00"),
    "gpt-4o-mini": Price(input="0.15", output="0.60"),
    "gpt-4.1": Price(input="2.00", output="8.00"),
    "gpt-4.1-mini": Price(input="0.40", output="1.60"),
    "gpt-4.1-nano": Price(input="0.10", output="0.40"),
    "o4-mini": Price(input="1.10", output="4.40"),
    "fake": Price(input="1.00", output="2.00"),
}

_MILLION = Decimal(1_000_000)
# Tokens a message costs beyond its text (its role and delimiters), and a reply's priming:
# OpenAI's chat format takes 3 and 3; a margin over that.
_PER_MESSAGE = 8
_PER_REQUEST = 8


class ToolCall(BaseModel):
    """A call the model asks for: its id (which the tool's answer names), the tool, and the
    arguments as the model wrote them (JSON text, not yet parsed)."""

    id: str = Field(default="", max_length=200)
    name: str = Field(min_length=1, max_length=200)
    arguments: str = "{}"


class ToolSpec(BaseModel):
    """A tool the model may call: its name, what it does, and its arguments' JSON Schema."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ChatMessage(BaseModel):
    """One message: the system's, the user's, the assistant's (with the tool calls it asked
    for), or a tool's answer to the call `tool_call_id`."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class ChatRequest(BaseModel):
    """The input of `llm.chat.complete`."""

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1)
    # The reply's most, in tokens: what the call reserves at the output price.
    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    tools: list[ToolSpec] = Field(default_factory=list)


class ChatReply(BaseModel):
    """The output of `llm.chat.complete`. `cost_usd` is what remit billed the call (from the
    app's price table), filled in when the call settles."""

    content: str
    model: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    finish_reason: str = "stop"
    cost_usd: Decimal | None = None


def prompt_bound(request: ChatRequest) -> int:
    """The most tokens `request`'s prompt can count as: a token is at least one byte of text
    (the messages', their tool calls' and the tools' schemas as they are sent)."""
    text = sum(_message_bytes(message) for message in request.messages)
    tools = sum(len(tool.model_dump_json().encode()) for tool in request.tools)
    return text + tools + _PER_MESSAGE * len(request.messages) + _PER_REQUEST


def _message_bytes(message: ChatMessage) -> int:
    calls = sum(len(c.name.encode()) + len(c.arguments.encode()) + 16 for c in message.tool_calls)
    return len(message.content.encode()) + calls + len((message.tool_call_id or "").encode())


def price_of(prices: Mapping[str, Price], model: str) -> Price:
    """The price of `model`, or `OpError` saying how to add it."""
    price = prices.get(model)
    if price is None:
        known = ", ".join(sorted(prices)) or "none"
        raise OpError(
            f"`llm.chat.complete` has no price for the model `{model}`, so it cannot reserve the "
            f"call's cost and did not make it: add it to the app, "
            f'App(llm_prices={{"{model}": Price(input="…", output="…")}}) in USD per million '
            f"tokens (priced now: {known})",
            op="llm.chat.complete",
        )
    return price


class ChatCost:
    """What a chat completion costs (see the module's docstring)."""

    def max_cost(self, input: ChatRequest, prices: Mapping[str, Price]) -> Decimal:
        price = price_of(prices, input.model)
        return (prompt_bound(input) * price.input + input.max_tokens * price.output) / _MILLION

    def actual_cost(
        self, input: ChatRequest, output: ChatReply, prices: Mapping[str, Price]
    ) -> Decimal:
        # Priced as the model asked for: a vendor may answer with a dated name
        # (`gpt-4o-mini-2024-07-18`) that the table does not list.
        price = price_of(prices, input.model)
        return (output.input_tokens * price.input + output.output_tokens * price.output) / _MILLION


chat_complete = op(
    "llm.chat.complete",
    effect="read",
    input=ChatRequest,
    output=ChatReply,
    cost=ChatCost(),
    description="A chat completion, billed to the app's budgets.",
)


class LLMDriver(Driver):
    """The OpenAI-compatible chat-completions API. Needs `LLM_API_KEY`; `LLM_BASE_URL` (default
    OpenAI's, `https://api.openai.com/v1`) points it at another vendor or a local server."""

    credentials = ("LLM_API_KEY",)

    def __init__(self, transport: httpx.BaseTransport | None = None, timeout: float = 120.0):
        self.transport = transport
        self.timeout = timeout

    @implements(chat_complete)
    def complete(self, input: ChatRequest, call: CallContext) -> ChatReply:
        import httpx

        base_url = (call.environ.get("LLM_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        body: dict[str, Any] = {
            "model": input.model,
            "messages": [_wire(message) for message in input.messages],
            "max_tokens": input.max_tokens,
        }
        if input.temperature is not None:
            body["temperature"] = input.temperature
        if input.tools:
            body["tools"] = [
                {"type": "function", "function": tool.model_dump()} for tool in input.tools
            ]
        headers = {
            "Authorization": f"Bearer {call.credential('LLM_API_KEY')}",
            "Accept": "application/json",
        }
        try:
            with httpx.Client(
                transport=self.transport, timeout=min(self.timeout, call.timeout)
            ) as client:
                response = client.post(f"{base_url}/chat/completions", json=body, headers=headers)
        except httpx.ConnectError as error:
            raise DriverError(
                f"LLM API at {base_url} unreachable: {error}", retryable=True, maybe_applied=False
            ) from error
        except httpx.HTTPError as error:
            raise DriverError(
                f"LLM API at {base_url} failed: {type(error).__name__}: {error}", retryable=True
            ) from error
        if response.status_code >= 400:
            raise _refusal(response)
        try:
            return _reply(response.json(), input)
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise DriverError(
                f"LLM API answered {response.status_code} with a body that is not a chat "
                f"completion ({type(error).__name__}: {error}): {response.text[:200]!r}",
                retryable=False,
                status=response.status_code,
            ) from None


def _wire(message: ChatMessage) -> dict[str, Any]:
    """A message as the chat-completions API takes it."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        wire["content"] = message.content or None
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _refusal(response: httpx.Response) -> DriverError:
    """An error answer as a DriverError: a rate limit, a timeout or a server error may pass;
    any other 4xx says what is wrong with the request."""
    message, code = f"LLM API answered {response.status_code}", None
    try:
        error = response.json().get("error")
    except ValueError:
        error = None
    if isinstance(error, dict):
        message += f": {error.get('message') or error}"
        code = error.get("code") or error.get("type")
    elif error:
        message += f": {error}"
    status = response.status_code
    return DriverError(
        message,
        retryable=status in (408, 409, 429) or status >= 500,
        status=status,
        vendor_code=None if code is None else str(code),
    )


def _reply(body: dict[str, Any], request: ChatRequest) -> ChatReply:
    choice = body["choices"][0]
    usage = body.get("usage") or {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt is None or completion is None:
        # No counts to bill by: count the call at its most, never less than it may have cost.
        prompt, completion = prompt_bound(request), request.max_tokens
    calls = [
        ToolCall(
            id=call.get("id") or "",
            name=call["function"]["name"],
            arguments=call["function"].get("arguments") or "{}",
        )
        for call in choice["message"].get("tool_calls") or []
    ]
    return ChatReply(
        content=choice["message"].get("content") or "",
        model=body.get("model") or request.model,
        tool_calls=calls,
        input_tokens=int(prompt),
        output_tokens=int(completion),
        finish_reason=choice.get("finish_reason") or "stop",
    )


@dataclass(frozen=True)
class FakeReply:
    """One scripted answer of `FakeLLM`: its text, the tools it calls, and, if given, its token
    counts (otherwise a token per four characters, as English text roughly runs)."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str = "stop"


# A function model: the request in, the reply out (or an exception raised); None leaves the
# request to the echo.
Respond = Callable[[ChatRequest], "FakeReply | str | None"]


class FakeLLM(Fake):
    """Chat completions in memory. Answers with `responses` in order (a `FakeReply`, a string,
    or an exception to raise, such as a `DriverError`), then with `respond(request)` when given
    (a function model: a scripted conversation that reads the tools' answers), else by echoing
    the last user message. A reply longer than `max_tokens` is cut there (`finish_reason`
    "length"). `delay` seconds pass before each answer; `requests` holds every request answered
    or failed, and with `record` each is also appended to that file as a JSON line, so a test
    sees the requests of every process (a worker killed and started again)."""

    def __init__(
        self,
        responses: Iterable[FakeReply | str | Exception] = (),
        *,
        respond: Respond | None = None,
        record: Path | str | None = None,
        delay: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.responses: list[FakeReply | str | Exception] = list(responses)
        self.respond = respond
        self.record = Path(record) if record is not None else None
        self.delay = delay
        self.requests: list[ChatRequest] = []
        self._script = threading.Lock()

    def state(self) -> dict[str, Any]:
        """Every request answered or failed, in order, and how many scripted replies are left."""
        with self._script:
            return {
                "requests": [request.model_dump(mode="json") for request in self.requests],
                "replies_left": len(self.responses),
            }

    @implements(chat_complete)
    def complete(self, input: ChatRequest, call: CallContext) -> ChatReply:
        with self._script:
            self.requests.append(input)
            if self.record is not None:
                with self.record.open("a") as record:
                    record.write(input.model_dump_json() + "\n")
            scripted = self.responses.pop(0) if self.responses else None
        if self.delay:
            time.sleep(self.delay)
        if isinstance(scripted, Exception):
            raise scripted
        if scripted is None and self.respond is not None:
            scripted = self.respond(input)
        if scripted is None:
            users = [m.content for m in input.messages if m.role == "user"]
            scripted = FakeReply(users[-1] if users else input.messages[-1].content)
        elif isinstance(scripted, str):
            scripted = FakeReply(scripted)
        content, finish = scripted.content, scripted.finish_reason
        output_tokens = scripted.output_tokens
        if output_tokens is None:
            written = content + "".join(c.name + c.arguments for c in scripted.tool_calls)
            output_tokens = math.ceil(len(written) / 4)
        if output_tokens > input.max_tokens:
            content = content[: input.max_tokens * 4]
            output_tokens, finish = input.max_tokens, "length"
        input_tokens = scripted.input_tokens
        if input_tokens is None:
            input_tokens = sum(math.ceil(_message_bytes(m) / 4) + 3 for m in input.messages) + 3
        return ChatReply(
            content=content,
            model=input.model,
            tool_calls=scripted.tool_calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            finish_reason=finish,
        )


llm = Connector(
    "llm",
    ops=[chat_complete],
    driver=LLMDriver,
    fake=FakeLLM,
    description="Chat completions over the OpenAI-compatible API, billed to the app's budgets.",
)
