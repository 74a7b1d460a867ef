"""The parts every `ctx` operation's step is made of: the options DBOS runs it with, its body
run off the event loop for an async workflow, and what its checkpoint means (the value, or the
typed error, on the first run and on every replay); and `ctx.<vendor>.<resource>.<op>(...)`, the
path to an op.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from remit.connectors.llm import ChatMessage
from remit.core.errors import InputInvalid, OpNotDeclared, TooLarge
from remit.core.limits import check_json
from remit.core.outcome import Failed, Ok, StepFailure, parse_outcome
from remit.declare.ops import Op
from remit.execution.journal import Mark

if TYPE_CHECKING:
    from dbos import StepOptions

Out = TypeVar("Out", bound=BaseModel)
T = TypeVar("T")


def db_step_options(name: str) -> StepOptions:
    """A step retried by DBOS only when the database failed under it: an op call then re-enters
    through the ledger, which decides whether calling the vendor again is safe; a gate or a
    sleep only reads and writes remit's rows."""
    return {
        "name": name,
        "retries_allowed": True,
        "max_attempts": 4,
        "interval_seconds": 1.0,
        "backoff_rate": 2.0,
        "should_retry": lambda error: isinstance(
            error, sa.exc.OperationalError | sa.exc.InterfaceError
        ),
    }


def op_options(op: Op[Any, Any]) -> StepOptions:
    return db_step_options(op.id)


def gate_options(key: str) -> StepOptions:
    return db_step_options(f"approval:{key}")


def sleep_options() -> StepOptions:
    return db_step_options("sleep")


def wait_options(mark: Mark) -> StepOptions:
    return db_step_options(mark.name)


def in_thread(body: Callable[[], T]) -> Callable[[], Any]:
    """`body` as an async step's body: run in a thread, off the event loop."""

    async def run() -> T:
        return await asyncio.to_thread(body)

    return run


def chat_input(
    prompt: str | Iterable[ChatMessage | Mapping[str, str]],
    model: str,
    max_tokens: int,
    temperature: float | None,
    system: str | None,
) -> dict[str, Any]:
    """The input of `llm.chat.complete` for `ctx.llm`, parsed (and refused) as any op's is."""
    given: list[Any] = (
        [{"role": "user", "content": prompt}]
        if isinstance(prompt, str)
        else [m.model_dump() if isinstance(m, BaseModel) else dict(m) for m in prompt]
    )
    if system is not None:
        given.insert(0, {"role": "system", "content": system})
    return {
        "model": model,
        "messages": given,
        "max_tokens": max_tokens,
        "temperature": temperature,
    }


def finish_op(op: Op[Any, Out], checkpoint: Any) -> Out:
    """The output of an op call's step, from its checkpointed outcome, or its typed error."""
    return op.output.model_validate(parse_outcome(checkpoint).unwrap(op.id))


def step_outcome(name: str, value: Any) -> dict[str, Any]:
    try:
        output = to_jsonable_python(value)
        check_json(output, what=f"the output of step `{name}`", cap="output_bytes", target=name)
        return Ok(output=output).to_json()
    except Exception as error:
        message = (
            str(error)
            if isinstance(error, TooLarge | InputInvalid)
            else f"step `{name}` returned a value that is not JSON ({type(error).__name__}: "
            f"{error}): return plain data or a pydantic model"
        )
        return Failed(
            failure=StepFailure(message=message, error_type=type(error).__name__)
        ).to_json()


def step_error(name: str, error: Exception) -> dict[str, Any]:
    message = f"step `{name}` failed: {type(error).__name__}: {error}"
    return Failed(failure=StepFailure(message=message, error_type=type(error).__name__)).to_json()


def step_value(name: str, checkpoint: Any, output: Any, cause: BaseException | None) -> Any:
    """The value of a `ctx.step`, from its checkpointed outcome, or `StepFailed`."""
    outcome = parse_outcome(checkpoint)
    if isinstance(outcome, Failed):
        raise outcome.failure.exception(name) from cause
    if output is None:
        return outcome.output
    return TypeAdapter(output).validate_python(outcome.output)


class AttributePath:
    """`ctx.<vendor>.<resource>.<op>(...)`: the attribute path to an op id."""

    def __init__(
        self, invoke: Callable[..., Any], ops: Mapping[str, Op[Any, Any]], path: str
    ) -> None:
        self._invoke = invoke
        self._ops = ops
        self._path = path

    def __getattr__(self, part: str) -> Any:
        if part.startswith("_"):
            raise AttributeError(part)
        return AttributePath(self._invoke, self._ops, f"{self._path}.{part}")

    def __call__(self, input: Any = None, /, *, key: str | None = None, **fields: Any) -> Any:
        if self._path not in self._ops:
            raise OpNotDeclared(
                f"`ctx.{self._path}(...)` names no op any connector in the app declares",
                op=self._path,
            )
        return self._invoke(self._path, input, key=key, **fields)
