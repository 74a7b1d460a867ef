"""Making one op call inside a run: the ledger, the retries, and a JSON outcome.

The call runs as a DBOS step. It returns an *outcome*, a plain JSON dict, rather than raising:
DBOS checkpoints the outcome, and the run's `ctx` turns a failed outcome into the same typed
error on the first run and on every replay (DBOS's JSON serializer would otherwise bring an
exception back as a generic one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ValidationError

from remit.budgets.model import Price, Reservation, money
from remit.budgets.store import Budgets
from remit.connectors.base import CallContext, Implementation
from remit.connectors.credentials import SecretError
from remit.core import telemetry
from remit.core.backoff import next_delay
from remit.core.clock import Clock
from remit.core.errors import (
    BudgetExceeded,
    DriverError,
    MissingCredential,
    OpError,
    OpUncertain,
    RemitError,
    RunMovedOn,
    Suspended,
)
from remit.core.ledger import (
    CallRecord,
    LedgerRow,
    LedgerStatus,
    LedgerStore,
    input_hash,
    on_reentry,
)
from remit.core.runs import RunInfo
from remit.declare.ops import Op
from remit.people.tasks import Held, TaskOpener

log = logging.getLogger("remit.calls")

Outcome = dict[str, Any]


# The run id a direct call (`remit call`) is recorded under in the ledger: it has no run row.
DIRECT_CALL_PREFIX = "call_"


def ok(output: Any) -> Outcome:
    return {"ok": output}


def failure(kind: str, message: str, **info: Any) -> Outcome:
    return {"error": {"kind": kind, "message": message, **info}}


def raise_failure(op_id: str, outcome: Outcome) -> None:
    """Raise the typed error an outcome records; return if it records a success."""
    error = outcome.get("error")
    if error is None:
        return
    kind, message = error["kind"], error["message"]
    if kind == "uncertain" and error.get("task_id"):
        # The run waits for a person to say whether the call happened (see `tasks.py`).
        raise Suspended("waiting", message, task_id=error["task_id"])
    if kind == "uncertain":
        raise OpUncertain(message, op=op_id, idempotency_key=error["idempotency_key"])
    if kind == "credential":
        raise MissingCredential(message, op=op_id, variable=error["variable"])
    if kind == "budget":
        raise BudgetExceeded(
            message,
            op=op_id,
            scope=error["scope"],
            period=error["period"],
            **{what: Decimal(error[what]) for what in _AMOUNTS},
        )
    if kind == "moved":
        raise RunMovedOn(message)
    if kind == "driver":
        raise DriverError(
            message,
            retryable=bool(error.get("retryable")),
            status=error.get("status"),
            vendor_code=error.get("vendor_code"),
            maybe_applied=error.get("maybe_applied"),
            op=op_id,
        )
    raise OpError(message, op=op_id)


def _missing_credential(environ: Mapping[str, str], op: Op[Any, Any], name: str) -> str | None:
    """Why the credential `name` cannot be given to `op`'s driver; None when it can."""
    try:
        if environ.get(name):
            return None
    except SecretError as error:
        return f"op `{op.id}` cannot read the credential `{name}`: {error}"
    return str(MissingCredential.named(op.id, name))


def _driver_failure(error: DriverError) -> Outcome:
    return failure(
        "driver",
        str(error),
        retryable=error.retryable,
        status=error.status,
        vendor_code=error.vendor_code,
        maybe_applied=error.maybe_applied,
    )


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

    @telemetry.traced_call
    def call(
        self,
        run: RunInfo,
        op: Op[Any, Any],
        payload: dict[str, Any],
        *,
        step_id: int,
        key: str,
        memo: dict[str, Any] | None = None,
    ) -> Outcome:
        """Make the call keyed `key` (stable across retries and attempts) and return its outcome.

        `memo` lives as long as the step: when DBOS retries the step because recording the
        outcome failed, the outcome already in `memo` is recorded, and the vendor is not
        called again.
        """
        memo = {} if memo is None else memo
        if "settled" in memo:
            record, status, values, outcome = memo["settled"]
            if outcome.get("error", {}).get("kind") != "key":
                self._record(memo, record, status, values)
            return dict(outcome)
        record = CallRecord(
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
        started_at = self.clock.now()
        if op.effect == "write":
            begun = self.ledger.begin(record, None if run.direct else run.workflow_id)
            if begun.moved_on:
                return failure(
                    "moved",
                    f"run {run.run_id} has moved on from attempt {run.workflow_id} (it was "
                    f"cancelled or a later attempt took over): `{op.id}` was not called",
                )
            if begun.existing is not None:
                conflict = _conflict(record, begun.existing)
                if conflict is not None:
                    return conflict
                decided = self._reenter(op, record, begun.existing, memo)
                if decided is not None:
                    return decided
        # A read has no row before the call: a key that belongs to another call is found when
        # its outcome is recorded (calling a read twice is harmless).
        implementation = self.implementations[op.vendor]
        for name in getattr(implementation, "credentials", ()):
            missing = _missing_credential(self.environ, op, name)
            if missing is not None:
                outcome = failure("credential", missing, variable=name)
                self._finish_failed(record, outcome, tries=0, started_at=started_at, memo=memo)
                return outcome
        return self._attempt_calls(op, implementation, record, payload, run, started_at, memo)

    def _reenter(
        self, op: Op[Any, Any], record: CallRecord, existing: LedgerRow, memo: dict[str, Any]
    ) -> Outcome | None:
        decision = on_reentry(existing.status, safe_to_repeat=op.safe_to_repeat)
        if decision == "replay" and existing.status != "uncertain":
            if existing.status == "ok":
                return ok(existing.output)
            info = dict(existing.error_info or {})
            info.setdefault("kind", "failed")
            info["message"] = existing.error or "the call failed"
            return {"error": info}
        if decision == "call":
            self.ledger.retake(record.idempotency_key, record.attempt)
            log.info(
                "calling %s again with key %s: %s",
                op.id,
                record.idempotency_key,
                "a person confirmed it did not happen"
                if existing.status == "not_done"
                else "its earlier outcome is unknown",
            )
            return None
        # Uncertain, now or before: the run waits at the call's task (opened now, or read back
        # and moved to this attempt), or carries on with a person's answer given meanwhile.
        message = (
            f"op `{op.id}` (key {record.idempotency_key}) started and its outcome is unknown: "
            "the process making it stopped mid-call. It is not idempotent, so remit does not "
            "call it again by itself"
        )
        held = self._hold(record, message, tries=existing.tries)
        if isinstance(held, LedgerRow):
            return self._reenter(op, record, held, memo)
        return _waits(record, held)

    def _attempt_calls(
        self,
        op: Op[Any, Any],
        implementation: Implementation,
        record: CallRecord,
        payload: dict[str, Any],
        run: RunInfo,
        started_at: datetime,
        memo: dict[str, Any],
    ) -> Outcome:
        # Parsed once for every try, the pricing and the bill (`payload` is a parsed input's JSON).
        request = op.input.model_validate(payload)
        refused = self._reserve(op, record, request, run, started_at, memo)
        if refused is not None:
            return refused
        call = CallContext(
            op=op,
            idempotency_key=record.idempotency_key,
            run_id=run.run_id,
            attempt=run.attempt,
            actor=run.actor,
            environ=self.environ,
        )
        tries = 0
        while True:
            tries += 1
            try:
                output = implementation.invoke(op, request, call)
            except DriverError as error:
                if op.effect == "write" and not op.idempotent and error.maybe_applied:
                    return self._uncertain(
                        record,
                        f"op `{op.id}` (key {record.idempotency_key}) failed in a way that may "
                        f"have reached the vendor ({error}): it is not idempotent, so remit will "
                        "not call it again; check with the vendor whether it happened",
                        tries=tries,
                        memo=memo,
                    )
                delay = next_delay(
                    op.retry,
                    safe_to_repeat=op.safe_to_repeat or not error.maybe_applied,
                    retryable=error.retryable,
                    tries=tries,
                )
                if delay is None:
                    outcome = _driver_failure(error)
                    self._finish_failed(
                        record, outcome, tries=tries, started_at=started_at, memo=memo
                    )
                    return outcome
                log.info("%s failed (%s); trying again in %.2fs", op.id, error, delay)
                if op.effect == "write":
                    self.ledger.tried(record.idempotency_key, tries)
                self.clock.sleep(delay)
                continue
            except MissingCredential as error:
                outcome = failure("credential", str(error), variable=error.variable)
                self._finish_failed(record, outcome, tries=tries, started_at=started_at, memo=memo)
                return outcome
            except SecretError as error:
                message = f"op `{op.id}` cannot read the credential `{error.name}`: {error}"
                outcome = failure("credential", message, variable=error.name or "")
                self._finish_failed(record, outcome, tries=tries, started_at=started_at, memo=memo)
                return outcome
            except Exception as error:
                # Not a DriverError: a bug, or output that does not parse. The vendor may have
                # acted before it, so a write that cannot be repeated safely is uncertain.
                message = f"op `{op.id}` raised {type(error).__name__}: {error}"
                if op.effect == "write" and not op.safe_to_repeat:
                    return self._uncertain(
                        record, message + "; its outcome is unknown", tries=tries, memo=memo
                    )
                if isinstance(error, ValidationError):
                    message = f"op `{op.id}` returned output that does not parse: {error}"
                outcome = failure("driver", message, retryable=False)
                self._finish_failed(record, outcome, tries=tries, started_at=started_at, memo=memo)
                return outcome
            dumped = self._priced(op, request, output, memo)
            return self._settle(
                memo, record, "ok", ok(dumped), tries=tries, output=dumped, started_at=started_at
            )

    def _uncertain(
        self, record: CallRecord, message: str, *, tries: int, memo: dict[str, Any]
    ) -> Outcome:
        """The call this step just made may have happened: its row becomes `uncertain`, its
        task opens, and the run waits for a person. (No `settled` memo: a DBOS retry of the
        step re-enters the `started` row, which is uncertain the same way.)"""
        telemetry.call_settled({"tries": tries})
        held = self._hold(record, message, tries=tries)
        if isinstance(held, LedgerRow):
            raise RemitError(
                f"ledger key {record.idempotency_key}: the call was in flight, yet its row is "
                f"{held.status}: only a person's answer to its task moves an uncertain row"
            )
        bill: _Bill | None = memo.get("bill")
        if bill is not None and bill.reservation is not None and self.budgets is not None:
            # What it cost is unknown: its spend is not counted, as for a call that failed.
            self.budgets.release(bill.reservation)
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

    def _finish_failed(
        self,
        record: CallRecord,
        outcome: Outcome,
        *,
        tries: int,
        started_at: datetime,
        memo: dict[str, Any],
    ) -> Outcome:
        error = outcome["error"]
        return self._settle(
            memo,
            record,
            "failed",
            outcome,
            tries=tries,
            error=error["message"],
            error_info=error,
            started_at=started_at,
        )

    def _settle(
        self,
        memo: dict[str, Any],
        record: CallRecord,
        status: LedgerStatus,
        outcome: Outcome,
        **values: Any,
    ) -> Outcome:
        """Record the call's outcome, keeping it in `memo` first (see `call`)."""
        memo["settled"] = (record, status, values, outcome)
        telemetry.call_settled(values)
        if self._record(memo, record, status, values):
            return outcome
        existing = self.ledger.get(record.idempotency_key)
        assert existing is not None, "a ledger key that is taken has a row"
        taken = _conflict(record, existing)
        assert taken is not None
        memo["settled"] = (record, status, values, taken)
        return taken

    def _reserve(
        self,
        op: Op[Any, Any],
        record: CallRecord,
        request: BaseModel,
        run: RunInfo,
        started_at: datetime,
        memo: dict[str, Any],
    ) -> Outcome | None:
        """For an op with a cost, before its first try: price the call at its most and reserve
        that in every budget that applies (once per call: a vendor bills the answer, not the
        failed tries). The outcome to return instead of calling, or None to go ahead."""
        if op.cost is None:
            return None
        if op.effect == "read":
            # Safe to repeat, but each call is billed: one the ledger holds is not made again.
            existing = self.ledger.get(record.idempotency_key)
            if existing is not None:
                return _conflict(record, existing) or _recorded(existing)
        try:
            most = money(op.cost.max_cost(request, self.prices))
        except Exception as error:
            message = (
                str(error)
                if isinstance(error, OpError)
                else f"op `{op.id}` could not price the call, so it did not make it "
                f"({type(error).__name__}: {error})"
            )
            outcome = failure("cost", message)
            return self._finish_failed(record, outcome, tries=0, started_at=started_at, memo=memo)
        bill = memo["bill"] = _Bill(most)
        if self.budgets is None:
            return None
        try:
            reservation = self.budgets.reserve(
                op_id=op.id,
                key=record.idempotency_key,
                run_id=run.run_id,
                workflow_id=run.workflow_id,
                workflow=run.workflow,
                max_cost=most,
            )
        except BudgetExceeded as refused:
            log.warning("run %s: %s", run.run_id, refused)
            outcome = failure(
                "budget",
                str(refused),
                scope=refused.scope,
                period=refused.period,
                **{what: str(getattr(refused, what)) for what in _AMOUNTS},
            )
            return self._finish_failed(record, outcome, tries=0, started_at=started_at, memo=memo)
        if reservation is not None and reservation.status == "settled":
            # Another execution of this step settled the call meanwhile, with its ledger row.
            settled = self.ledger.get(record.idempotency_key)
            if settled is not None:
                del memo["bill"]
                return _recorded(settled)
        bill.reservation = reservation
        return None

    def _priced(
        self, op: Op[Any, Any], request: BaseModel, output: Any, memo: dict[str, Any]
    ) -> dict[str, Any]:
        """The output as JSON; for an op with a cost, with what the call cost noted for its
        settlement, and in the output's `cost_usd` if it has one."""
        dumped: dict[str, Any] = output.model_dump(mode="json")
        bill: _Bill | None = memo.get("bill")
        if bill is None or op.cost is None:
            return dumped
        try:
            bill.cost = money(op.cost.actual_cost(request, output, self.prices))
        except Exception:
            # The call was made and billed: count it at its most rather than not at all.
            log.exception("%s: pricing the reply failed; billed at its most", op.id)
            bill.cost = bill.most
        if "cost_usd" in op.output.model_fields:
            dumped["cost_usd"] = str(bill.cost)
        return dumped

    def _record(
        self, memo: dict[str, Any], record: CallRecord, status: LedgerStatus, values: dict[str, Any]
    ) -> bool:
        """Write the call's ledger row. For a call that reserved spend, in the transaction that
        settles its reservation at its cost (it succeeded) or releases it (it did not)."""
        bill: _Bill | None = memo.get("bill")
        if bill is None:
            return self.ledger.finish(record, status, **values)
        cost = bill.cost if status == "ok" else None
        if bill.reservation is None or self.budgets is None:
            return self.ledger.finish(record, status, cost=cost, **values)

        def write(conn: Any) -> bool:
            return self.ledger.finish_in(conn, record, status, cost=cost, **values)

        if cost is None:
            return self.budgets.release(bill.reservation, record=write)
        return self.budgets.settle(bill.reservation, cost, record=write)


def _waits(record: CallRecord, held: Held) -> Outcome:
    """The outcome of a call whose run waits at its task: checkpointed with the step, so a
    replay of the step waits again rather than calling."""
    if held.opened:
        log.warning("%s", held.message)
    return failure(
        "uncertain", held.message, idempotency_key=record.idempotency_key, task_id=held.task_id
    )


def _conflict(record: CallRecord, existing: LedgerRow) -> Outcome | None:
    """A failure when the key already names a different call (another op, or other input)."""
    if (existing.op_id, existing.input_hash) == (record.op_id, record.input_hash):
        return None
    what = f"`{existing.op_id}`" + (" with other input" if existing.op_id == record.op_id else "")
    return failure(
        "key",
        f"idempotency key {record.idempotency_key} already belongs to a call of {what} "
        f"(step {existing.step_id}): give each call its own `key=`, or make the workflow call "
        "the same op with the same input at the same step on every attempt",
    )


_AMOUNTS = ("limit", "spent", "reserved", "requested")


@dataclass
class _Bill:
    """A call of an op with a cost, as it goes: its most, its reservation (None when no budget
    applies), and what it cost once it answered."""

    most: Decimal
    reservation: Reservation | None = None
    cost: Decimal | None = None


def _recorded(existing: LedgerRow) -> Outcome:
    """The outcome a finished ledger row records, to return instead of calling again."""
    if existing.status == "ok":
        return ok(existing.output)
    info = dict(existing.error_info or {})
    info.setdefault("kind", "failed")
    info["message"] = existing.error or "the call failed"
    return {"error": info}
