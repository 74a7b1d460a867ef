"""`ctx` of an async workflow: `AsyncContext`, whose methods are `Context`'s, awaited.

Each builds its step as `Context`'s does (`BaseContext`, in `context.py`) and runs it on the
event loop; a sync function it is given (a step's, a transaction's) runs in a thread, so it
blocks no other async workflow.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

import sqlalchemy as sa
from pydantic import BaseModel

from remit.connectors.llm import ChatMessage, ChatReply, chat_complete
from remit.core import telemetry
from remit.core.activity import Record
from remit.core.errors import RemitError
from remit.declare.ops import Op
from remit.declare.workflows import Workflow
from remit.execution.context import BaseContext, Draft, Out
from remit.execution.journal import children_mark, gate_mark, sleep_mark, step_mark
from remit.execution.step_parts import (
    chat_input,
    finish_op,
    in_thread,
    sleep_options,
    step_error,
    step_outcome,
    step_value,
    wait_options,
)
from remit.execution.timers import Timers
from remit.execution.waits import ChildHandle
from remit.people.approvals import Decision


class AsyncContext(BaseContext):
    """The `ctx` of an async workflow: the same methods as `Context`, awaited."""

    async def step(self, name: str, fn: Callable[[], Any], *, output: Any = None) -> Any:
        """Run `fn` (sync or async) once as a checkpointed step; see `Context.step`."""
        self._before_step()
        cause: list[BaseException] = []

        @telemetry.traced_step("step", name)
        async def body() -> dict[str, Any]:
            try:
                # A sync function runs in a thread, so it cannot block other async workflows.
                value = fn() if inspect.iscoroutinefunction(fn) else await asyncio.to_thread(fn)
                if inspect.isawaitable(value):
                    value = await value
                return await asyncio.to_thread(self._redacted, step_outcome(name, value))
            except Exception as error:
                checkpoint = step_error(name, error)
                return await asyncio.to_thread(self._redacted, checkpoint, error, cause)

        outcome = await self._steps.reserve().run_async(step_mark(name), {"name": name}, body)
        return step_value(name, outcome, output, cause[0] if cause else None)

    async def transaction(
        self, name: str, fn: Callable[[sa.Connection], Any], *, output: Any = None
    ) -> Any:
        """Run `fn(conn)` (sync: it runs in a thread) once as a step that writes to the app's
        own tables, exactly once; see `Context.transaction`."""
        self._before_step()
        cause: list[BaseException] = []
        body = in_thread(self._transaction_body(name, fn, cause))
        outcome = await self._steps.reserve().run_async(step_mark(name), {"name": name}, body)
        return step_value(name, outcome, output, cause[0] if cause else None)

    async def call(
        self, op: Op[Any, Out], input: Any = None, /, *, key: str | None = None, **fields: Any
    ) -> Out:
        """Call `op` as a checkpointed step; see `Context.call`."""
        self._before_step()
        declared, payload = self._prepare(op, input, fields, key)
        outcome = await self._op_step(declared, payload, key).run_async()
        return finish_op(cast(Op[Any, Out], declared), outcome)

    async def llm(
        self,
        prompt: str | Iterable[ChatMessage | Mapping[str, str]],
        *,
        model: str,
        max_tokens: int = 1024,
        temperature: float | None = None,
        system: str | None = None,
        key: str | None = None,
    ) -> ChatReply:
        """Ask a model and return its reply; see `Context.llm`."""
        chat = chat_input(prompt, model, max_tokens, temperature, system)
        return await self.call(chat_complete, chat, key=key)

    async def raise_budget(
        self, *, scope: str, period: str, limit: Decimal | int | str, by: str
    ) -> Decimal:
        """Set a budget period's limit as a checkpointed step; see `Context.raise_budget`."""
        budgets = self._caller.budgets
        if budgets is None:
            raise RemitError("this worker keeps no budgets: ctx.raise_budget has nothing to raise")
        return Decimal(
            await self.step(
                "raise-budget",
                lambda: str(budgets.raise_limit(scope, period, limit, by=by).limit_usd),
            )
        )

    async def approval(
        self,
        key: str,
        *,
        type: str,
        title: str,
        draft: Draft,
        assignee: str | None = None,
        expires_in: timedelta | float | None = None,
        record: Record | None = None,
    ) -> Decision[Draft]:
        """Wait for a decision on the approval `key`; see `Context.approval`."""
        self._before_step()
        options, body, outcome = self._gate_step(
            key, type, title, draft, assignee, expires_in, record
        )

        async def in_thread() -> dict[str, Any]:
            return await asyncio.to_thread(body)

        row = await self._steps.reserve().run_async(gate_mark(key), options, in_thread)
        return cast(Decision[Draft], outcome(row))

    async def wait_for(
        self, topic: str, *, model: Any = None, timeout: timedelta | float | None = None
    ) -> Any:
        """Wait for a message on `topic`; see `Context.wait_for`."""
        self._before_step()
        mark, body, value = self._wait_for_step(topic, model, timeout)
        row = await self._steps.reserve().run_async(mark, wait_options(mark), in_thread(body))
        return value(row)

    async def start(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        key: str | None = None,
        detached: bool = False,
    ) -> ChildHandle:
        """Start a child run; see `Context.start`."""
        self._before_step()
        slot = self._steps.reserve()
        mark, body, handle = self._start_step(slot, workflow, input, key, detached)
        return handle(await slot.run_async(mark, wait_options(mark), in_thread(body)))

    async def wait(self, child: ChildHandle) -> Any:
        """Wait for a child run to end; see `Context.wait`."""
        return (await self.wait_all([child]))[0]

    async def wait_all(self, children: Iterable[ChildHandle]) -> list[Any]:
        """Wait for child runs to end; see `Context.wait_all`."""
        self._before_step()
        body, outputs = self._children_step(children)
        mark = children_mark()
        return outputs(
            await self._steps.reserve().run_async(mark, wait_options(mark), in_thread(body))
        )

    async def publish(self, key: str, value: Any) -> None:
        """Publish a value for the world to see; see `Context.publish`."""
        self._before_step()
        name, body = self._publish_step(key, value)
        await self._steps.reserve().run_async(step_mark(name), {"name": name}, in_thread(body))

    async def patch(self, name: str) -> bool:
        """See `Context.patch`."""
        return await self._steps.patch_async(name)

    async def sleep(self, duration: timedelta | float) -> None:
        """Wait `duration` durably; see `Context.sleep`."""
        self._before_step()
        seconds, body = self._sleep_step(duration)
        if body is None:
            with telemetry.step_span("sleep", "sleep", seconds=seconds):
                await self._steps.short_sleep_async(seconds)
            return

        async def in_thread() -> dict[str, Any]:
            assert body is not None
            return await asyncio.to_thread(body)

        Timers.outcome(
            await self._steps.reserve().run_async(sleep_mark(), sleep_options(), in_thread)
        )
