"""Making one op call, inside a run or directly: the ledger, the call, and its outcome.

The call of a run runs as a DBOS step. It returns an `Outcome` (`core/outcome.py`) rather than
raising: the outcome's JSON is the step's checkpoint, and the run's `ctx` unwraps it into the
output or the same typed error on the first run and on every replay.

A call goes, in order, through:

- the call's `started` row, durable before the driver is called and fenced by the run's
  current attempt. A row already under the key is a re-entry, and `reentry.py` decides: return its
  recorded outcome, call again, fail on a key that names another call, or hold;
- the driver's credentials;
- for an op with a cost, its bill (`billing.py`): priced and reserved, or refused;
- the tries (`tries.py`);
- its outcome recorded in the ledger, in the transaction that settles or releases its bill.

A write whose outcome is unknown is made `uncertain` and its task opened instead (`tasks.py`):
the run waits for a person to say whether it happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel

from remit.budgets.store import Budgets
from remit.connectors.base import CallContext, Implementation
from remit.connectors.credentials import SecretError
from remit.connectors.redaction import app_secrets
from remit.core import telemetry
from remit.core.clock import Clock
from remit.core.errors import MissingCredential, RemitError
from remit.core.ledger import Begun, CallRecord, LedgerRow, LedgerStore, input_hash, read_row
from remit.core.outcome import (
    CallFailure,
    CredentialFailure,
    Failed,
    MovedOnFailure,
    Ok,
    Outcome,
    UncertainFailure,
)
from remit.core.runs import RunInfo
from remit.declare.costs import Price
from remit.declare.ops import Op
from remit.execution.billing import Bill
from remit.execution.checkpoint import Checkpoint
from remit.execution.reentry import CallAgain, Conflict, Hold, Replay, conflict, reenter
from remit.execution.tries import (
    DEFAULT_OP_TIMEOUT,
    Answered,
    GaveUp,
    InFlight,
    Unknown,
    make_tries,
)
from remit.people.tasks import Held, TaskOpener

log = logging.getLogger("remit.calls")


# The run id a direct call (`remit call`) is recorded under in the ledger: it has no run row.
DIRECT_CALL_PREFIX = "call_"


@dataclass(frozen=True)
class Settled:
    """The outcome a call settled on, with what recording it takes. `taken` is the failure
    returned instead when the key turned out to belong to another call (nothing recorded)."""

    record: CallRecord
    outcome: Outcome
    tries: int
    started_at: datetime
    taken: Failed | None = None


@dataclass
class CallMemo:
    """What one op call keeps for as long as its step: when DBOS retries the step because
    recording the outcome failed, the outcome it settled on is recorded again, and the vendor
    is neither called nor billed again. `checkpoint`: the step's, when its ledger outcome can
    be written with it (see `checkpoint.py`)."""

    bill: Bill | None = None
    settled: Settled | None = None
    checkpoint: Checkpoint | None = None
    # A read in a run's step that costs nothing writes its row only once it has run for a
    # while or is tried again (`shown`), or else whole, with its outcome.
    read_waits: bool = False
    shown: bool = False


class KeyTaken(RemitError):
    """Raised in a step's checkpoint transaction, which it rolls back: the call's key turned
    out to belong to another call. `failed` is the call's outcome instead."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.message)
        self.failed = failed


# A read in a run shows in the ledger as `started` once it has run this many seconds. A
# quicker one's row is written once, with its outcome and its step's checkpoint: a read cannot
# double anything, so it needs no row before it is made, only one that shows it while it runs.
READ_SHOWN_AFTER = 1.0


class OpCaller:
    """Calls ops on the worker's implementations, recording each call in the ledger."""

    def __init__(
        self,
        *,
        implementations: Mapping[str, Implementation],
        ledger: LedgerStore,
        clock: Clock,
        environ: Mapping[str, str],
        tasks: TaskOpener,
        budgets: Budgets | None = None,
        prices: Mapping[str, Price] | None = None,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
    ) -> None:
        self.implementations = implementations
        self.ledger = ledger
        self.clock = clock
        self.environ = environ
        # Where a write whose outcome is unknown opens its task for a person.
        self.tasks = tasks
        # What calls of ops with a cost are billed to, priced by the app's price table.
        self.budgets = budgets
        self.prices: Mapping[str, Price] = prices or {}
        # Seconds one try may take, for an op that does not say (REMIT_OP_TIMEOUT).
        self.op_timeout = op_timeout

    @telemetry.traced_call
    def call(
        self,
        run: RunInfo,
        op: Op[Any, Any],
        payload: dict[str, Any],
        *,
        step_id: int,
        key: str,
        memo: CallMemo | None = None,
    ) -> Outcome:
        """Make the call keyed `key` (stable across retries and attempts) and return its
        outcome. `memo` lives as long as the step (see `CallMemo`)."""
        memo = CallMemo() if memo is None else memo
        if memo.settled is not None:
            return self._settle_again(memo, memo.settled)
        record = _record_of(run, op, payload, step_id=step_id, key=key)
        started_at = self.clock.now()
        # Every call's `started` row is durable before its driver is called, so a call in
        # flight shows (`remit show`), one cut off mid-call is found (a read's is `abandoned`
        # once its attempt has ended, a write's may be `uncertain`), and one already answered
        # replays rather than being made, or paid for, again. But a read in a run that costs
        # nothing: it is made afresh whenever its step runs, so its row waits until the read
        # has run for `READ_SHOWN_AFTER` seconds, or until it ends, with its step's checkpoint.
        in_flight = None
        memo.read_waits = self._read_at_checkpoint(op, run, memo)
        if memo.read_waits:
            in_flight = InFlight(READ_SHOWN_AFTER, lambda: self._show(op, record, memo))
        else:
            entered = self._begin(op, record, run, payload, memo)
            if entered is not None:
                return entered
        implementation = self.implementations[op.vendor]
        missing = self._missing_credential(op, implementation)
        if missing is not None:
            return self._settle(memo, record, Failed(failure=missing), 0, started_at)
        # Parsed once for every try, the pricing and the bill (`payload` is a parsed input's JSON).
        request = op.input.model_validate(payload)
        if op.cost is not None:
            instead = self._bill(op, record, request, run, started_at, memo)
            if instead is not None:
                return instead
        call = CallContext(
            op=op,
            idempotency_key=key,
            run_id=run.run_id,
            attempt=run.attempt,
            actor=run.actor,
            environ=self.environ,
            timeout=op.timeout or self.op_timeout,
        )
        tried = make_tries(
            op,
            implementation,
            request,
            call,
            clock=self.clock,
            retrying=self._retrying(record, in_flight),
            timeout=call.timeout,
            in_flight=in_flight,
        )
        if isinstance(tried, Unknown):
            return self._uncertain(record, tried.message, tries=tried.tries, bill=memo.bill)
        if isinstance(tried, GaveUp):
            return self._settle(
                memo, record, Failed(failure=tried.failure), tried.tries, started_at
            )
        dumped = self._output(op, request, tried, memo.bill)
        return self._settle(memo, record, Ok(output=dumped), tried.tries, started_at)

    def prepare(
        self,
        run: RunInfo,
        op: Op[Any, Any],
        payload: dict[str, Any],
        *,
        step_id: int,
        key: str,
        memo: CallMemo,
    ) -> None:
        """Before the call's step runs: its `started` row, when it has one before the call, is
        written in the transaction that finds the step has no checkpoint (`checkpoint.py`)."""
        checkpoint = memo.checkpoint
        if checkpoint is None or self._read_at_checkpoint(op, run, memo):
            return
        record = _record_of(run, op, payload, step_id=step_id, key=key)
        sent = self._sent(op, payload)
        started_at = self.ledger.clock.now()
        checkpoint.begin(
            lambda conn: self.ledger.begin_in(
                conn, record, run.workflow_id, sent=sent, started_at=started_at
            )
        )

    def _sent(self, op: Op[Any, Any], payload: dict[str, Any]) -> Any:
        """What a write that cannot be repeated keeps beside its row, its secrets redacted: a
        person asked whether it happened sees it (None for any other call)."""
        if op.effect == "write" and not op.idempotent:
            return app_secrets(self.environ, self.implementations.values()).json(payload)
        return None

    @staticmethod
    def _read_at_checkpoint(op: Op[Any, Any], run: RunInfo, memo: CallMemo) -> bool:
        """Whether the call is a read in a run's step that costs nothing, whose row can wait
        for its step's checkpoint."""
        return (
            op.effect == "read"
            and op.cost is None
            and not run.direct
            and memo.checkpoint is not None
        )

    def _show(self, op: Op[Any, Any], record: CallRecord, memo: CallMemo) -> None:
        """The `started` row of a read that has run for a while (or is tried again), once: the
        row already under the key, of the same call, moves to this one (its step ran before).
        A key another call holds is left to the read's end, which fails on it."""
        if memo.shown:
            return
        memo.shown = True
        begun = self.ledger.begin_read(record)
        if (
            begun.existing is not None
            and conflict(begun.existing, op.id, record.input_hash) is None
        ):
            self.ledger.retake(record, begun.existing)

    def _begin(
        self,
        op: Op[Any, Any],
        record: CallRecord,
        run: RunInfo,
        payload: dict[str, Any],
        memo: CallMemo,
    ) -> Outcome | None:
        """The call's `started` row: None to go ahead and call, or the outcome to return.
        A read that costs nothing writes it in one statement, unfenced (it cannot double
        anything); a write's, or a read's with a cost, is fenced on the run's attempt, and
        was written by its step's check when it could be (`prepare`)."""
        if op.effect == "read" and op.cost is None:
            begun = self.ledger.begin_read(record)
            if begun.existing is None:
                return None
            # A run's step running again reads afresh; a direct call's key replays.
            return self._reenter(op, record, begun.existing, afresh=not run.direct)
        took, answer = (False, None) if memo.checkpoint is None else memo.checkpoint.took_begin()
        if took:
            assert isinstance(answer, Begun)
            begun = answer
        else:
            workflow_id = None if run.direct else run.workflow_id
            begun = self.ledger.begin(record, workflow_id, sent=self._sent(op, payload))
        if begun.moved_on:
            message = (
                f"run {run.run_id} has moved on from attempt {run.workflow_id} (it was cancelled "
                f"or a later attempt took over): `{op.id}` was not called"
            )
            return Failed(failure=MovedOnFailure(message=message))
        if begun.existing is None:
            return None
        return self._reenter(op, record, begun.existing)

    def _reenter(
        self, op: Op[Any, Any], record: CallRecord, existing: LedgerRow, *, afresh: bool = False
    ) -> Outcome | None:
        """A call that found `existing` under its key, as `reenter` decides: None to go ahead
        and call, or the outcome to return."""
        decision = reenter(existing, op, record.input_hash, afresh=afresh)
        if isinstance(decision, Conflict):
            return _key_taken(record.idempotency_key, decision)
        if isinstance(decision, Replay):
            return decision.outcome
        if isinstance(decision, CallAgain):
            self.ledger.retake(record, existing)
            log.info(
                "calling %s again with key %s: %s",
                op.id,
                record.idempotency_key,
                "a person confirmed it did not happen"
                if decision.not_done
                else "a read is made afresh"
                if op.effect == "read" and existing.status in ("ok", "failed")
                else "its earlier outcome is unknown",
            )
            return None
        assert isinstance(decision, Hold)
        # Uncertain, now or before: the run waits at the call's task (opened now, or read back
        # and moved to this attempt), or carries on with a person's answer given meanwhile.
        message = (
            f"op `{op.id}` (key {record.idempotency_key}) started and its outcome is unknown: "
            "the process making it stopped mid-call. It is not idempotent, so remit does not "
            "call it again by itself"
        )
        held = self._hold(record, message, tries=existing.tries)
        if isinstance(held, LedgerRow):
            return self._reenter(op, record, held)
        return _waits(record, held)

    def _missing_credential(
        self, op: Op[Any, Any], implementation: Implementation
    ) -> CredentialFailure | None:
        """The first credential the driver needs that cannot be given to it, if any."""
        for name in implementation.needs(op.id):
            try:
                if self.environ.get(name):
                    continue
            except SecretError as error:
                message = f"op `{op.id}` cannot read the credential `{name}`: {error}"
                return CredentialFailure(message=message, variable=name)
            return CredentialFailure(
                message=str(MissingCredential.named(op.id, name)), variable=name
            )
        return None

    def _bill(
        self,
        op: Op[Any, Any],
        record: CallRecord,
        request: BaseModel,
        run: RunInfo,
        started_at: datetime,
        memo: CallMemo,
    ) -> Outcome | None:
        """For an op with a cost, before its first try: its bill, priced at its most and
        reserved in every budget that applies. The outcome to return instead of calling, or
        None to go ahead."""
        # Its `started` row is written: a call the ledger holds an answer for was replayed.
        bill = Bill.open(op, request, self.prices)
        if isinstance(bill, CallFailure):
            return self._settle(memo, record, Failed(failure=bill), 0, started_at)
        memo.bill = bill
        if self.budgets is None:
            return None
        refused = bill.reserve(self.budgets, op, record.idempotency_key, run)
        if refused is not None:
            return self._settle(memo, record, Failed(failure=refused), 0, started_at)
        if bill.settled:
            # Another execution of this step settled the call meanwhile, with its ledger row.
            settled = self.ledger.get(record.idempotency_key)
            if settled is not None:
                memo.bill = None
                return settled.outcome
        return None

    def _retrying(
        self, record: CallRecord, in_flight: InFlight | None
    ) -> Callable[[int, str], None]:
        """What a try again notes first: the call's row counts its tries, and the try that
        failed is kept with what went wrong (a read whose row waited shows it now)."""

        def note(tries: int, error: str) -> None:
            if in_flight is not None:
                in_flight.show()
            self.ledger.tried(record, tries, error)

        return note

    def _output(
        self, op: Op[Any, Any], request: BaseModel, answered: Answered, bill: Bill | None
    ) -> dict[str, Any]:
        """The output as JSON; for an op with a cost, priced for its settlement, and with its
        cost in its `cost_usd` if it has one."""
        dumped: dict[str, Any] = answered.output.model_dump(mode="json")
        if bill is None:
            return dumped
        return bill.price(op, request, answered.output, self.prices, dumped)

    def _uncertain(
        self, record: CallRecord, message: str, *, tries: int, bill: Bill | None
    ) -> Failed:
        """The call this step just made may have happened: its row becomes `uncertain`, its
        task opens, and the run waits for a person. (Nothing settled in the memo: a DBOS retry
        of the step re-enters the `started` row, which is uncertain the same way.)"""
        telemetry.call_settled({"tries": tries})
        held = self._hold(record, message, tries=tries)
        if isinstance(held, LedgerRow):
            raise RemitError(
                f"ledger key {record.idempotency_key}: the call was in flight, yet its row is "
                f"{held.status}: only a person's answer to its task moves an uncertain row"
            )
        if bill is not None:
            bill.release(self.budgets)
        return _waits(record, held)

    def _hold(self, record: CallRecord, message: str, *, tries: int) -> Held | LedgerRow:
        return self.tasks.hold(
            run_id=record.run_id,
            attempt=record.attempt,
            step_id=record.step_id,
            op_id=record.op_id,
            idempotency_key=record.idempotency_key,
            reason=message,
            tries=tries,
        )

    def _settle(
        self,
        memo: CallMemo,
        record: CallRecord,
        outcome: Outcome,
        tries: int,
        started_at: datetime,
    ) -> Outcome:
        """Record the call's outcome, keeping it in `memo` first (see `CallMemo`)."""
        settled = memo.settled = Settled(record, outcome, tries, started_at)
        telemetry.call_settled({"tries": tries})
        if self._record(memo, settled):
            return outcome
        existing = self.ledger.get(record.idempotency_key)
        assert existing is not None, "a ledger key that is taken has a row"
        other = conflict(existing, record.op_id, record.input_hash)
        assert other is not None, "a ledger key is taken only by another call"
        taken = _key_taken(record.idempotency_key, other)
        memo.settled = replace(settled, taken=taken)
        return taken

    def _settle_again(self, memo: CallMemo, settled: Settled) -> Outcome:
        """A DBOS retry of the step: record the outcome the call settled on, if it was not."""
        if settled.taken is not None:
            return settled.taken
        self._record(memo, settled)
        return settled.outcome

    def _record(self, memo: CallMemo, settled: Settled) -> bool:
        """Write the call's ledger row. For a call with a bill, in the transaction that settles
        its reservation at its cost (it succeeded) or releases it (it did not). For one
        without, in its step's checkpoint when it has one, where a key that turns out to be
        another call's raises `KeyTaken` (so True here only says the write is on its way)."""
        bill = memo.bill
        if bill is None and memo.checkpoint is not None:
            memo.checkpoint.add(self._with_checkpoint(memo, settled))
            return True

        record, outcome, tries, started_at = (
            settled.record,
            settled.outcome,
            settled.tries,
            settled.started_at,
        )

        def write(conn: sa.Connection | None, cost: Decimal | None) -> bool:
            if conn is None:
                return self.ledger.finish(
                    record, outcome, tries=tries, started_at=started_at, cost=cost
                )
            return self.ledger.finish_in(
                conn, record, outcome, tries=tries, started_at=started_at, cost=cost
            )

        if bill is None:
            return write(None, None)
        return bill.record(self.budgets, answered=isinstance(settled.outcome, Ok), write=write)

    def _with_checkpoint(self, memo: CallMemo, settled: Settled) -> Callable[[sa.Connection], None]:
        """The call's ledger outcome, as written in its step's checkpoint transaction: a read
        whose row waited writes it whole, any other call settles the row its start wrote."""
        record, outcome = settled.record, settled.outcome
        whole = memo.read_waits and not memo.shown

        def write(conn: sa.Connection) -> None:
            if whole:
                other = self.ledger.settle_read_in(
                    conn, record, outcome, tries=settled.tries, started_at=settled.started_at
                )
            elif self.ledger.finish_in(
                conn, record, outcome, tries=settled.tries, started_at=settled.started_at
            ):
                other = None
            else:
                other = read_row(conn, record.idempotency_key)
            if other is None:
                return
            taken = conflict(other, record.op_id, record.input_hash)
            assert taken is not None, "a ledger key is taken only by another call"
            raise KeyTaken(_key_taken(record.idempotency_key, taken))

        return write

    def after_step(self, memo: CallMemo, *, returned: bool) -> None:
        """Once the call's step has ended: a ledger outcome its checkpoint did not take (the
        step returned without DBOS recording it through remit's wrapper) is written now."""
        checkpoint = memo.checkpoint
        if checkpoint is None:
            return
        checkpoint.close()
        write = checkpoint.pending()
        if returned and write is not None:

            def alone() -> None:
                with self.ledger.db.begin() as conn:
                    write(conn)

            self.ledger.db.retrying("ledger: an op call's outcome", alone)


def _record_of(
    run: RunInfo, op: Op[Any, Any], payload: dict[str, Any], *, step_id: int, key: str
) -> CallRecord:
    return CallRecord(
        run_id=run.run_id,
        attempt=run.attempt,
        step_id=step_id,
        op_id=op.id,
        effect=op.effect,
        idempotent=op.idempotent,
        idempotency_key=key,
        input_hash=input_hash(payload),
        actor=run.actor,
    )


def _waits(record: CallRecord, held: Held) -> Failed:
    """The outcome of a call whose run waits at its task: checkpointed with the step, so a
    replay of the step waits again rather than calling."""
    if held.opened:
        log.warning("%s", held.message)
    return Failed(
        failure=UncertainFailure(
            message=held.message, idempotency_key=record.idempotency_key, task_id=held.task_id
        )
    )


def _key_taken(key: str, conflict: Conflict) -> Failed:
    """The failure of a call whose key already names a different call."""
    existing = conflict.existing
    what = f"`{existing.op_id}`" + (" with other input" if conflict.same_op else "")
    message = (
        f"idempotency key {key} already belongs to a call of {what} (step {existing.step_id}): "
        "give each call its own `key=`, or make the workflow call the same op with the same "
        "input at the same step on every attempt"
    )
    return Failed(failure=CallFailure(kind="key", message=message))
