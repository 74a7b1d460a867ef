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
from typing import Any

from pydantic import ValidationError

from remit.clock import Clock
from remit.connectors.base import CallContext, Implementation
from remit.connectors.ops import Op
from remit.errors import DriverError, MissingCredential, OpError, OpUncertain, RunMovedOn
from remit.ledger import CallRecord, LedgerRow, LedgerStatus, LedgerStore, input_hash, on_reentry
from remit.retry import next_delay
from remit.secrets import SecretError

log = logging.getLogger("remit.calls")

Outcome = dict[str, Any]


@dataclass(frozen=True)
class RunInfo:
    """The attempt a call belongs to."""

    run_id: str
    attempt: int
    workflow_id: str
    actor: str
    # A direct call (`remit call`) belongs to no run: its writes are not fenced on one.
    direct: bool = False


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
    if kind == "uncertain":
        raise OpUncertain(message, op=op_id, idempotency_key=error["idempotency_key"])
    if kind == "credential":
        raise MissingCredential(message, op=op_id, variable=error["variable"])
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
    ) -> None:
        self.implementations = implementations
        self.ledger = ledger
        self.clock = clock
        self.environ = environ

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
                self.ledger.finish(record, status, **values)
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
        if decision == "replay":
            if existing.status == "ok":
                return ok(existing.output)
            info = dict(existing.error_info or {})
            info.setdefault("kind", "failed")
            info["message"] = existing.error or "the call failed"
            return {"error": info}
        if decision == "call":
            self.ledger.retake(record.idempotency_key, record.attempt)
            log.info(
                "calling %s again with key %s: its earlier outcome is unknown",
                op.id,
                record.idempotency_key,
            )
            return None
        message = (
            f"op `{op.id}` (key {record.idempotency_key}) started and its outcome is unknown: "
            "the process making it stopped mid-call. It is not idempotent, so remit will not call "
            "it again; check with the vendor whether it happened"
        )
        return self._uncertain(record, message, tries=existing.tries, memo=memo)

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
                output = implementation.invoke(op, op.input.model_validate(payload), call)
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
            dumped = output.model_dump(mode="json")
            return self._settle(
                memo, record, "ok", ok(dumped), tries=tries, output=dumped, started_at=started_at
            )

    def _uncertain(
        self, record: CallRecord, message: str, *, tries: int, memo: dict[str, Any]
    ) -> Outcome:
        log.warning("%s", message)
        outcome = failure("uncertain", message, idempotency_key=record.idempotency_key)
        return self._settle(
            memo,
            record,
            "uncertain",
            outcome,
            tries=tries,
            error=message,
            error_info=outcome["error"],
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
        if self.ledger.finish(record, status, **values):
            return outcome
        existing = self.ledger.get(record.idempotency_key)
        assert existing is not None, "a ledger key that is taken has a row"
        taken = _conflict(record, existing)
        assert taken is not None
        memo["settled"] = (record, status, values, taken)
        return taken


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
