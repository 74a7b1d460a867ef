"""`ctx`: what a workflow function uses to checkpoint work and call ops.

A sync workflow gets a `Context`; an async one an `AsyncContext`, whose methods are awaited.
Every `ctx.step` and op call is a DBOS step: once it has finished it is never executed again,
not on recovery, not on a later attempt. Its checkpoint is its outcome's JSON
(`core/outcome.py`), which `ctx` unwraps into the value or the typed error, so the first run
and a replay see the same value, or the same error. While the app is paused, a step about to
start ends the attempt instead, with the run `paused` (see `pause.py`).

Where each operation takes its position is `positions.py`; what its step is made of (its
options, and what its checkpoint means), `step_parts.py`; the waits for the world (messages,
children) and what a run publishes, `waits.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import sqlalchemy as sa
from pydantic import BaseModel, TypeAdapter, ValidationError

from remit.connectors.llm import ChatMessage, ChatReply, chat_complete
from remit.connectors.redaction import app_secrets
from remit.core import telemetry
from remit.core.activity import Record, check_record
from remit.core.errors import (
    InputInvalid,
    OpNotDeclared,
    RemitError,
    RunTimedOut,
    Suspended,
)
from remit.core.keys import key_problem
from remit.core.ledger import input_hash
from remit.core.limits import check_json
from remit.core.outcome import Failed, Ok, parse_outcome
from remit.core.redact import Redactor
from remit.core.runs import RunInfo
from remit.core.text import describe_seconds
from remit.declare.ops import Op
from remit.declare.workflows import Workflow
from remit.execution.app_writes import AppWrites
from remit.execution.calls import CallMemo, KeyTaken, OpCaller
from remit.execution.checkpoint import Checkpoint
from remit.execution.journal import (
    Journal,
    Mark,
    children_mark,
    gate_mark,
    message_mark,
    op_mark,
    sleep_mark,
    start_mark,
    step_mark,
)
from remit.execution.positions import LiveSteps, Slot, Steps
from remit.execution.step_parts import (
    AttributePath,
    chat_input,
    finish_op,
    gate_options,
    op_options,
    sleep_options,
    step_error,
    step_outcome,
    step_value,
    wait_options,
)
from remit.execution.timers import Timers
from remit.execution.waits import (
    ChildHandle,
    ChildStart,
    Waits,
    check_published,
    child_run_id,
    ids_of,
    payload_problem,
    seconds_of,
)
from remit.people.approvals import Decision
from remit.people.gates import Gates

if TYPE_CHECKING:
    # DBOS runs the steps; it is imported where a live attempt calls it, so that an app's
    # module, which imports `Context` for its annotations, does not load it.
    from dbos import StepOptions

    from remit.core.database import Database

Out = TypeVar("Out", bound=BaseModel)
Draft = TypeVar("Draft", bound=BaseModel)
T = TypeVar("T")


class BaseContext:
    """What `Context` and `AsyncContext` (`async_context.py`) share: the run, its steps'
    positions, and how each kind of step is made."""

    def __init__(
        self,
        run: RunInfo,
        workflow: Workflow,
        ops: Mapping[str, Op[Any, Any]],
        caller: OpCaller,
        gates: Gates,
        timers: Timers,
        paused: Callable[[], bool] = lambda: False,
        steps: Steps | None = None,
        waits: Waits | None = None,
    ) -> None:
        self._run = run
        self._workflow = workflow
        self._ops = ops
        self._caller = caller
        self._gates = gates
        self._timers = timers
        self._paused = paused
        self._waits_given = waits
        # Where each operation takes its position: DBOS, checked against the run's journal.
        self._steps = steps or LiveSteps(Journal.empty(run.run_id))

    def _before_step(self) -> None:
        """Before a step starts: past the workflow's `timeout=`, the run fails
        (`RunTimedOut`); while the app is paused, the attempt ends with the run `paused`. Its
        finished steps stay; a resume carries it on from here."""
        deadline = self._run.deadline
        if deadline is not None and self._caller.clock.now() >= deadline:
            timeout = self._workflow.timeout or 0.0
            raise RunTimedOut(
                f"run {self._run.run_id} went past its workflow's timeout of "
                f"{describe_seconds(timeout)} (`{self._workflow.name}`, timeout=): it had to end "
                f"by {deadline:%Y-%m-%d %H:%M:%S} UTC. Raise the timeout, or retry the run",
                run_id=self._run.run_id,
                timeout=timeout,
            )
        if self._paused():
            raise Suspended("paused", "the app is paused")

    # -- secrets: a step's value or error holds none (see `connectors/redaction.py`) ----------

    def _redacted(
        self,
        checkpoint: dict[str, Any],
        error: Exception | None = None,
        cause: list[BaseException] | None = None,
    ) -> dict[str, Any]:
        """A `ctx.step`'s checkpoint with the app's secrets redacted, before DBOS stores it.
        The error it failed with, if any, is redacted too and put in `cause` (the cause of
        the `StepFailed` the workflow sees)."""
        return self._redacted_by(self._secrets(), checkpoint, error, cause)

    def _secrets(self) -> Redactor:
        """The app's secrets as they are now (a stored secret's value is read again at most
        every few seconds, on a connection of its own)."""
        return app_secrets(self._caller.environ, self._caller.implementations.values())

    @staticmethod
    def _redacted_by(
        secrets: Redactor,
        checkpoint: dict[str, Any],
        error: Exception | None = None,
        cause: list[BaseException] | None = None,
    ) -> dict[str, Any]:
        """`_redacted`, with the secrets read already."""
        if error is not None and cause is not None:
            cause.append(secrets.exception(error))
        redacted: dict[str, Any] = secrets.json(checkpoint)
        return redacted

    def _sleep_step(
        self, duration: timedelta | float
    ) -> tuple[float, Callable[[], dict[str, Any]] | None]:
        """The seconds to sleep, and the body of its step when the sleep suspends the run."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        if not isinstance(seconds, int | float) or seconds < 0:
            raise InputInvalid(
                f"ctx.sleep({duration!r}): give a timedelta or seconds, 0 or more",
                target="ctx.sleep",
                errors=[],
            )
        if seconds <= self._timers.suspend_after:
            return float(seconds), None

        @telemetry.traced_step("sleep", "sleep", seconds=float(seconds))
        def body() -> dict[str, Any]:
            from dbos import DBOS

            step_id = DBOS.step_id
            assert step_id is not None, "a sleep runs as a DBOS step"
            return self._timers.open(self._run, step_id, float(seconds))

        return float(seconds), body

    def _transaction_body(
        self,
        name: str,
        fn: Callable[[sa.Connection], Any],
        cause: list[BaseException],
    ) -> Callable[[], dict[str, Any]]:
        """The body of a `ctx.transaction` step (see `app_writes.py`)."""
        problem = key_problem(name, what="transaction name", longest=200, example="book-invoice")
        if problem is not None:
            raise InputInvalid(problem, target="ctx.transaction", errors=[])

        @telemetry.traced_step("transaction", name)
        def body() -> dict[str, Any]:
            from dbos import DBOS

            position = DBOS.step_id
            assert position is not None, "a transaction runs as a DBOS step"
            # Read before the transaction begins: reading stored secrets takes a connection of
            # its own, which on SQLite, with the write lock held and every pooled connection
            # waiting for that lock, would wait for a connection none of them gives back.
            secrets = self._secrets()
            return AppWrites(self._caller.tasks.db).write(
                self._run,
                position,
                name,
                fn,
                now=self._caller.clock.now,
                done=lambda value: self._redacted_by(secrets, step_outcome(name, value)),
                failed=lambda error: self._redacted_by(
                    secrets, step_error(name, error), error, cause
                ),
            )

        return body

    @property
    def app_database(self) -> tuple[Database, str]:
        """The app's database and name: where remit's built-in workflows keep their own rows
        (inside a `ctx.step`, so a row is written once)."""
        return self._caller.tasks.db, self._caller.tasks.app

    @property
    def app_secrets(self) -> Any:
        """The app's stored secrets (`Secrets`), for remit's built-in workflows; None when
        this worker's calls see only an environment."""
        return getattr(self._caller.environ, "secrets", None)

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def attempt(self) -> int:
        return self._run.attempt

    @property
    def actor(self) -> str:
        """Who started the run."""
        return self._run.actor

    def _prepare(
        self, op: Op[Any, Any] | str, input: Any, fields: Mapping[str, Any], key: str | None
    ) -> tuple[Op[Any, Any], dict[str, Any]]:
        op_id = op if isinstance(op, str) else op.id
        problem = (
            None
            if key is None
            else key_problem(key, what=f"key for `{op_id}`", longest=100, example="reminder-1")
        )
        if problem is not None:
            raise InputInvalid(problem, target=op_id, errors=[])
        if op_id not in self._workflow.op_ids:
            raise OpNotDeclared(
                f"workflow `{self._workflow.name}` called `{op_id}`, which its `uses` does not "
                f"list: add it to @workflow(uses=[...])",
                op=op_id,
            )
        declared = self._ops[op_id]
        if input is None:
            input = dict(fields)
        elif fields:
            raise TypeError(
                f"`{op_id}`: pass the input as one model or dict, or as keywords, not both"
            )
        try:
            model = (
                input
                if isinstance(input, declared.input)
                else declared.input.model_validate(
                    input.model_dump() if isinstance(input, BaseModel) else input
                )
            )
        except ValidationError as error:
            raise InputInvalid.of(
                error, what=f"input to op `{op_id}`", target=op_id, after="Nothing was called"
            ) from None
        payload: dict[str, Any] = model.model_dump(mode="json")
        check_json(payload, what=f"the input to `{op_id}`", cap="op_bytes", target=op_id)
        return declared, payload

    def _gate_step(
        self,
        key: str,
        type: str,
        title: str,
        draft: BaseModel | Mapping[str, Any],
        assignee: str | None,
        expires_in: timedelta | float | None,
        record: Record | None,
    ) -> tuple[StepOptions, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], Any]]:
        """The gate's DBOS step, and what turns its row into a decision (or a suspension)."""
        declared, payload, seconds = self._gates.prepare(key, type, draft, expires_in)
        named = None if record is None else check_record(record, where=f"approval `{key}`")

        @telemetry.traced_step("approval", key)
        def body() -> dict[str, Any]:
            from dbos import DBOS

            step_id = DBOS.step_id
            assert step_id is not None, "an approval gate runs as a DBOS step"
            return self._gates.open(
                self._run,
                step_id,
                key=key,
                type=declared.name,
                title=title,
                draft=payload,
                assignee=assignee,
                expires_in=seconds,
                record=named,
                app=self._caller.tasks.app,
            )

        def outcome(row: dict[str, Any]) -> Any:
            return self._gates.outcome(row, declared)

        return gate_options(key), body, outcome

    @property
    def _waits(self) -> Waits:
        if self._waits_given is None:
            raise RemitError("this ctx has no waits: a worker's attempts do")
        return self._waits_given

    def _wait_for_step(
        self, topic: str, model: Any, timeout: timedelta | float | None
    ) -> tuple[Mark, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], Any]]:
        """A `ctx.wait_for`'s mark, the body of its step, and what turns its checkpoint into
        the value."""
        problem = key_problem(topic, what="topic", longest=100, example="paid")
        if problem is not None:
            raise InputInvalid(problem, target="ctx.wait_for", errors=[])
        seconds = seconds_of(timeout, what=f"ctx.wait_for({topic!r})")
        adapter = None if model is None else TypeAdapter(model)
        what = getattr(model, "__name__", str(model))
        waits, run = self._waits, self._run

        @telemetry.traced_step("wait_for", topic)
        def body() -> dict[str, Any]:
            from dbos import DBOS

            step_id = DBOS.step_id
            assert step_id is not None, "a wait for a message runs as a DBOS step"
            return waits.take(run, step_id, topic, seconds, payload_problem(adapter, what))

        def value(row: dict[str, Any]) -> Any:
            return Waits.message(run.run_id, row, adapter)

        return message_mark(topic), body, value

    def _start_step(
        self, slot: Slot, workflow: Any, input: Any, key: str | None, detached: bool
    ) -> tuple[Mark, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], ChildHandle]]:
        """A `ctx.start`'s mark, the body of its step, and what turns its checkpoint into the
        child's handle."""
        name = workflow if isinstance(workflow, str) else getattr(workflow, "name", None)
        if not isinstance(name, str) or name not in self._waits.workflows:
            known = ", ".join(sorted(self._waits.workflows)) or "none"
            raise OpNotDeclared(
                f"ctx.start({workflow!r}): the app has no such workflow (its workflows: {known})",
                op=str(name),
            )
        if key is not None:
            problem = key_problem(key, what="child key", longest=100, example="line-1")
            if problem is not None:
                raise InputInvalid(problem, target="ctx.start", errors=[])
        chosen = key or str(slot.position)
        payload = input.model_dump(mode="json") if isinstance(input, BaseModel) else input
        start = ChildStart(
            parent=self._run,
            step_id=slot.position,
            run_id=child_run_id(self._run.run_id, chosen),
            workflow=name,
            input=dict(payload),
            key=chosen,
            detached=detached,
        )
        waits = self._waits
        cause: list[BaseException] = []

        @telemetry.traced_step("start", name)
        def body() -> dict[str, Any]:
            try:
                return Ok(output=waits.start(start)).to_json()
            except RemitError as error:
                return self._redacted(step_error(f"start:{name}", error), error, cause)

        def handle(checkpoint: dict[str, Any]) -> ChildHandle:
            outcome = parse_outcome(checkpoint)
            if isinstance(outcome, Failed):
                raise outcome.failure.exception(f"start:{name}") from (cause[0] if cause else None)
            return ChildHandle.model_validate(outcome.output)

        return start_mark(name, chosen), body, handle

    def _children_step(
        self, handles: Iterable[ChildHandle]
    ) -> tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], list[Any]]]:
        """A `ctx.wait`'s step body, and what turns its checkpoint into the children's
        outputs."""
        given = ids_of(handles)
        waits, run = self._waits, self._run

        @telemetry.traced_step("wait", "children")
        def body() -> dict[str, Any]:
            from dbos import DBOS

            step_id = DBOS.step_id
            assert step_id is not None, "a wait for children runs as a DBOS step"
            return waits.wait_children(run, step_id, given)

        return body, waits.ends

    def _publish_step(self, key: str, value: Any) -> tuple[str, Callable[[], dict[str, Any]]]:
        problem = key_problem(key, what="published key", longest=100, example="progress")
        if problem is not None:
            raise InputInvalid(problem, target="ctx.publish", errors=[])
        jsonable = check_published(key, value)
        waits, run = self._waits, self._run

        @telemetry.traced_step("publish", key)
        def body() -> dict[str, Any]:
            from dbos import DBOS

            step_id = DBOS.step_id
            assert step_id is not None, "a publish runs as a DBOS step"
            return waits.publish(run, step_id, key, jsonable)

        return f"publish:{key}", body

    def __getattr__(self, vendor: str) -> Any:
        """`ctx.<vendor>.<resource>.<op>(...)`: the same call as `ctx.call(op, ...)`."""
        if vendor.startswith("_"):
            raise AttributeError(vendor)
        return AttributePath(cast(Any, self).call, self._ops, vendor)

    def _op_step(
        self,
        op: Op[Any, Any],
        payload: dict[str, Any],
        key: str | None,
        *,
        whole_key: str | None = None,
    ) -> _OpStep:
        """The step of an op call: the position it takes, what it is there, and its body,
        which returns the call's outcome as JSON (its checkpoint). `whole_key`: the call's
        whole idempotency key, one an earlier run began it under (see `_call_under`)."""
        slot = self._steps.reserve()
        # A call's position names it unless the workflow names it: `<run>:<step>` or
        # `<run>:key:<key>`, two spaces that cannot collide. A resumed run's positions up to
        # where it resumes are checked against its record before anything runs (`journal.py`),
        # so a deploy cannot move a key from under a call it started.
        name = str(slot.position) if key is None else f"key:{key}"
        idempotency_key = whole_key or f"{self._run.run_id}:{name}"
        # Outlives a DBOS retry of this step; the call's ledger outcome commits with the step.
        # (A replay of the record, `remit deploy check`'s, runs no step and commits nothing.)
        live = isinstance(self._steps, LiveSteps)
        checkpoint = Checkpoint.of(self._run.workflow_id, slot.position) if live else None
        memo = CallMemo(checkpoint=checkpoint)
        self._caller.prepare(
            self._run, op, payload, step_id=slot.position, key=idempotency_key, memo=memo
        )

        def body() -> dict[str, Any]:
            outcome = self._caller.call(
                self._run, op, payload, step_id=slot.position, key=idempotency_key, memo=memo
            )
            return outcome.to_json()

        # Where the run recorded a call, its input is compared too (nowhere, on a first attempt).
        marked = slot.position in self._steps.journal.marks
        digest = input_hash(payload) if marked else None
        return _OpStep(slot, op_mark(op.id, idempotency_key, digest), op, body, memo, self._caller)


class _OpStep:
    """An op call's step at its position: run once its mark is checked, its ledger outcome
    written with its checkpoint. A key that turned out to be another call's (`KeyTaken`) is
    the call's outcome, not checkpointed: the step runs again on a replay, and fails again."""

    def __init__(
        self,
        slot: Slot,
        mark: Mark,
        op: Op[Any, Any],
        body: Callable[[], dict[str, Any]],
        memo: CallMemo,
        caller: OpCaller,
    ) -> None:
        self._slot, self._mark, self._op, self._body = slot, mark, op, body
        self._memo, self._caller = memo, caller

    def run(self) -> Any:
        returned = False
        try:
            outcome = self._slot.run(self._mark, op_options(self._op), self._body)
            returned = True
            return outcome
        except KeyTaken as taken:
            return taken.failed.to_json()
        finally:
            self._caller.after_step(self._memo, returned=returned)

    async def run_async(self) -> Any:
        returned = False
        try:
            outcome = await self._slot.run_async(self._mark, op_options(self._op), self._body)
            returned = True
            return outcome
        except KeyTaken as taken:
            return taken.failed.to_json()
        finally:
            await asyncio.to_thread(self._caller.after_step, self._memo, returned=returned)


class Context(BaseContext):
    """The `ctx` of a sync workflow."""

    @overload
    def step(self, name: str, fn: Callable[[], Any]) -> Any: ...
    @overload
    def step(self, name: str, fn: Callable[[], Any], *, output: type[T]) -> T: ...
    def step(self, name: str, fn: Callable[[], Any], *, output: Any = None) -> Any:
        """Run `fn` once as a checkpointed step named `name` and return its value as JSON.

        With `output=SomeType` the JSON is parsed back into that type. If `fn` raises, the run
        sees `StepFailed` (now and on replay).
        """
        self._before_step()
        cause: list[BaseException] = []

        @telemetry.traced_step("step", name)
        def body() -> dict[str, Any]:
            try:
                return self._redacted(step_outcome(name, fn()))
            except Exception as error:
                return self._redacted(step_error(name, error), error, cause)

        outcome = self._steps.reserve().run(step_mark(name), {"name": name}, body)
        return step_value(name, outcome, output, cause[0] if cause else None)

    @overload
    def transaction(self, name: str, fn: Callable[[sa.Connection], Any]) -> Any: ...
    @overload
    def transaction(
        self, name: str, fn: Callable[[sa.Connection], Any], *, output: type[T]
    ) -> T: ...
    def transaction(
        self, name: str, fn: Callable[[sa.Connection], Any], *, output: Any = None
    ) -> Any:
        """Run `fn(conn)` once as a step that writes to the app's own tables, exactly once.

        `conn` is a SQLAlchemy connection to the app's database (remit's own), inside one
        transaction that first checks the run is still on this attempt, and commits the
        writes together with the step's record: a worker killed at any point leaves them
        made once or not at all, and a step that runs again answers from the record. Return
        JSON (with `output=SomeType` it is parsed back); raise to roll back (the run sees
        `StepFailed`). Statements on remit's or DBOS's tables are refused. See README,
        "The app's own tables".
        """
        self._before_step()
        cause: list[BaseException] = []
        body = self._transaction_body(name, fn, cause)
        outcome = self._steps.reserve().run(step_mark(name), {"name": name}, body)
        return step_value(name, outcome, output, cause[0] if cause else None)

    def call(
        self, op: Op[Any, Out], input: Any = None, /, *, key: str | None = None, **fields: Any
    ) -> Out:
        """Call `op` as a checkpointed step and return its output model.

        `key` names the call for its idempotency key (default: the step's position in the run).
        """
        self._before_step()
        declared, payload = self._prepare(op, input, fields, key)
        outcome = self._op_step(declared, payload, key).run()
        return finish_op(cast(Op[Any, Out], declared), outcome)

    def _call_under(self, op: Op[Any, Out], input: Any, *, idempotency_key: str) -> Out:
        """`call`, under the whole idempotency key an earlier run began the same call under
        and never learned the outcome of: the ledger's row moves to this run, and the call is
        made again (or replayed) as a re-entered call is, so the vendor makes it once. For
        remit's own workflows (the built-in `apply` settles an earlier apply's create)."""
        self._before_step()
        declared, payload = self._prepare(op, input, {}, None)
        outcome = self._op_step(declared, payload, None, whole_key=idempotency_key).run()
        return finish_op(cast(Op[Any, Out], declared), outcome)

    def llm(
        self,
        prompt: str | Iterable[ChatMessage | Mapping[str, str]],
        *,
        model: str,
        max_tokens: int = 1024,
        temperature: float | None = None,
        system: str | None = None,
        key: str | None = None,
    ) -> ChatReply:
        """Ask a model and return its reply: the op `llm.chat.complete` (the `llm` connector),
        which the workflow's `uses` must list, called as `ctx.call` calls it.

        `prompt` is one user message, or a list of messages (`{"role": ..., "content": ...}`);
        `system` goes before them. Before it is made, the call reserves the most it can cost
        (`max_tokens` and the prompt, at the model's price) in the budgets that apply, and is
        refused with `BudgetExceeded` when that would pass one.
        """
        chat = chat_input(prompt, model, max_tokens, temperature, system)
        return self.call(chat_complete, chat, key=key)

    def raise_budget(
        self, *, scope: str, period: str, limit: Decimal | int | str, by: str
    ) -> Decimal:
        """Set the limit of a budget period (`BudgetExceeded.scope` and `.period`) to `limit`
        USD, as a checkpointed step, recording `by` (who approved it) in the audit log; return
        the new limit. For a workflow that waits at an approval after `BudgetExceeded`."""
        budgets = self._caller.budgets
        if budgets is None:
            raise RemitError("this worker keeps no budgets: ctx.raise_budget has nothing to raise")
        return Decimal(
            self.step(
                "raise-budget",
                lambda: str(budgets.raise_limit(scope, period, limit, by=by).limit_usd),
            )
        )

    def approval(
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
        """Wait for a person to decide the approval `key` of this run, and return the decision.

        `type` names an `ApprovalType` the app declares, whose model `draft` must parse as.
        While the gate is pending the run is `waiting` and holds nothing in any worker; once it
        is decided the run carries on from here, the steps before the gate not run again.
        `assignee` limits who may decide it (an admin may too); `expires_in` (seconds or a
        timedelta) decides it `expired` if no one has by then. The decision's `status` is
        approved, rejected, expired, cancelled or withdrawn (taken back by whoever started the
        run: `approved` is false then too, so check `withdrawn` to tell it from a rejection);
        its `draft` is the edited one, if edited.
        `record` names the business record the gate concerns, e.g. `("invoice", "inv_1003")`
        (default: the run's, if it names one): its opening and decision go to that record's
        activity.
        """
        self._before_step()
        options, body, outcome = self._gate_step(
            key, type, title, draft, assignee, expires_in, record
        )
        row = self._steps.reserve().run(gate_mark(key), options, body)
        return cast(Decision[Draft], outcome(row))

    @overload
    def wait_for(self, topic: str, *, timeout: timedelta | float | None = None) -> Any: ...
    @overload
    def wait_for(
        self, topic: str, *, model: type[T], timeout: timedelta | float | None = None
    ) -> T | None: ...
    def wait_for(
        self, topic: str, *, model: Any = None, timeout: timedelta | float | None = None
    ) -> Any:
        """Wait for a message sent to this run on `topic` (`client.send`), and return it
        parsed as `model` (its JSON as sent, without one), or None once `timeout` (a
        timedelta or seconds) has passed with none.

        Messages on a topic are taken in the order they were sent, each once; one sent before
        the run waits is kept, and taken at once. While it waits the run is `waiting` and
        holds nothing in any worker. A message whose payload does not parse as `model` is
        kept as refused, and the wait raises `InputInvalid` naming the field.
        """
        self._before_step()
        mark, body, value = self._wait_for_step(topic, model, timeout)
        return value(self._steps.reserve().run(mark, wait_options(mark), body))

    def start(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        key: str | None = None,
        detached: bool = False,
    ) -> ChildHandle:
        """Start a child run of `workflow` with `input`, as one recorded step, and return its
        handle at once (give it to `ctx.wait`). The child is an ordinary run, started as this
        run's principal, under the policies. `key` names the start within this run (default:
        its position); a retry never starts it twice. Cancelling this run cancels the child
        while it runs, unless it is `detached`.
        """
        self._before_step()
        slot = self._steps.reserve()
        mark, body, handle = self._start_step(slot, workflow, input, key, detached)
        return handle(slot.run(mark, wait_options(mark), body))

    def wait(self, child: ChildHandle) -> Any:
        """Wait for a child run to end and return its output (parsed as its workflow's return
        type); raise `ChildFailed`, naming it and its error, if it failed or was cancelled.
        While it runs, this run is `waiting` and holds nothing in any worker."""
        return self.wait_all([child])[0]

    def wait_all(self, children: Iterable[ChildHandle]) -> list[Any]:
        """Wait for every child run in `children` to end, and return their outputs in order;
        see `wait`."""
        self._before_step()
        body, outputs = self._children_step(children)
        mark = children_mark()
        return outputs(self._steps.reserve().run(mark, wait_options(mark), body))

    def publish(self, key: str, value: Any) -> None:
        """Publish `value` (JSON) under `key` for the world to see while the run goes on: the
        progress of a batch, a quote awaiting acceptance. `client.state(run_id)`, `remit
        show` and the run's page show the latest value of each key. A recorded step: a replay
        does not publish again."""
        self._before_step()
        name, body = self._publish_step(key, value)
        self._steps.reserve().run(step_mark(name), {"name": name}, body)

    def patch(self, name: str) -> bool:
        """True where the run takes the code added under `name`; False for a run that had
        already passed this point before the change, which must keep its old path:

            if ctx.patch("check-credit"):
                ctx.call(check_credit, ...)
        """
        return self._steps.patch(name)

    def sleep(self, duration: timedelta | float) -> None:
        """Wait `duration` (a timedelta or seconds), durably: a crash does not restart it.

        Up to REMIT_SUSPEND_AFTER seconds (default 60) the attempt waits in its thread.
        Longer, the run is `sleeping` and holds nothing in any worker until its deadline,
        when a worker resumes it here without running a finished step again.
        """
        self._before_step()
        seconds, body = self._sleep_step(duration)
        if body is None:
            with telemetry.step_span("sleep", "sleep", seconds=seconds):
                self._steps.short_sleep(seconds)
            return
        Timers.outcome(self._steps.reserve().run(sleep_mark(), sleep_options(), body))
