"""Call outcomes: their JSON is the dict form earlier versions checkpointed and stored, and an
outcome recorded by an earlier version reads back and raises exactly as it did there."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from remit.core.errors import (
    BudgetExceeded,
    DriverError,
    MissingCredential,
    OpError,
    OpUncertain,
    RunMovedOn,
    StepFailed,
    Suspended,
)
from remit.core.ledger import LedgerRow
from remit.core.outcome import (
    BudgetFailure,
    CallFailure,
    DriverFailure,
    Failed,
    Ok,
    StepFailure,
    UncertainFailure,
    parse_failure,
    parse_outcome,
)


def _old_raise(op_id: str, outcome: dict[str, Any]) -> None:
    """How remit read an outcome before it was typed (`raise_failure`), kept word for word as
    the reference: an outcome recorded then must raise the same error now."""
    error = outcome.get("error")
    if error is None:
        return
    kind, message = error["kind"], error["message"]
    if kind == "uncertain" and error.get("task_id"):
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
            **{what: Decimal(error[what]) for what in ("limit", "spent", "reserved", "requested")},
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


# Failures as earlier versions wrote them, in steps' checkpoints and ledger rows alike.
OLD_FAILURES: list[dict[str, Any]] = [
    {
        "kind": "driver",
        "message": "card declined",
        "retryable": False,
        "status": 402,
        "vendor_code": "card_declined",
        "maybe_applied": False,
    },
    {
        "kind": "driver",
        "message": "gateway timeout",
        "retryable": True,
        "status": 504,
        "vendor_code": None,
        "maybe_applied": True,
    },
    # A driver that raised something other than a DriverError: only `retryable` was written.
    {
        "kind": "driver",
        "message": "op `shop.orders.create` raised KeyError: 'id'",
        "retryable": False,
    },
    {
        "kind": "credential",
        "message": "op `shop.orders.create` needs ...",
        "variable": "SHOP_TOKEN",
    },
    {
        "kind": "budget",
        "message": "budget app 2026-11 would pass its limit",
        "scope": "app",
        "period": "2026-11",
        "limit": "10.00",
        "spent": "9.90",
        "reserved": "0.05",
        "requested": "0.10",
    },
    {"kind": "moved", "message": "run r has moved on from attempt r:1"},
    {
        "kind": "uncertain",
        "message": "its outcome is unknown; task tsk_1 asks a person whether it happened",
        "idempotency_key": "r:4",
        "task_id": "tsk_1",
    },
    # Recorded before tasks existed: the run failed rather than waited.
    {"kind": "uncertain", "message": "its outcome is unknown", "idempotency_key": "r:4"},
    {"kind": "cost", "message": "op `llm.chat.complete` could not price the call"},
    {"kind": "key", "message": "idempotency key r:key:a already belongs to a call of `x`"},
    # Written by a person's answer to a task (`tasks.py`).
    {"kind": "not_done", "message": "`x` did not happen, as user:ann confirmed", "task_id": "t"},
    # A kind this version does not know still fails the call, keeping its fields.
    {"kind": "refused", "message": "refused by a later version", "reason": "policy"},
]


def _raised(call: Callable[[], object]) -> BaseException:
    """What `call` raised (some are BaseExceptions, as `Suspended` and `RunMovedOn` are)."""
    try:
        call()
    except BaseException as error:
        return error
    raise AssertionError("nothing was raised")


def _same_error(new: BaseException, old: BaseException) -> None:
    assert type(new) is type(old)
    assert str(new) == str(old)
    assert vars(new) == vars(old)


@pytest.mark.parametrize("old", OLD_FAILURES, ids=lambda old: str(old["kind"]))
def test_an_old_failure_raises_what_it_raised_before(old: dict[str, Any]) -> None:
    checkpoint = {"error": old}

    before = _raised(lambda: _old_raise("shop.orders.create", checkpoint))
    now = _raised(lambda: parse_outcome(checkpoint).unwrap("shop.orders.create"))

    _same_error(now, before)


@pytest.mark.parametrize("old", OLD_FAILURES, ids=lambda old: str(old["kind"]))
def test_a_failure_written_now_reads_the_same_under_the_old_reading(old: dict[str, Any]) -> None:
    # A deploy rolled back: the earlier version reads what this one checkpointed.
    written = parse_outcome({"error": old}).to_json()

    before = _raised(lambda: _old_raise("op", {"error": old}))
    after = _raised(lambda: _old_raise("op", written))

    _same_error(after, before)


@pytest.mark.parametrize("old", OLD_FAILURES, ids=lambda old: str(old["kind"]))
def test_an_old_failure_keeps_its_json_form(old: dict[str, Any]) -> None:
    written = parse_outcome({"error": old}).to_json()

    assert {name: written["error"][name] for name in old} == old
    assert set(written) == {"error"}
    assert parse_outcome(written) == parse_outcome({"error": old})


@pytest.mark.parametrize("output", [{"id": "ch_1", "amount": 1200}, None, [1, "two"], "text", 3])
def test_an_old_success_reads_back_its_output(output: Any) -> None:
    outcome = parse_outcome({"ok": output})

    assert outcome == Ok(output=output)
    assert outcome.unwrap("op") == output
    assert outcome.to_json() == {"ok": output}


def test_an_output_is_checkpointed_as_it_is() -> None:
    # A `ctx.step` value is JSON already; serializing it again would turn NaN into null.
    written = Ok(output={"ratio": float("nan"), "at": "2026-01-01"}).to_json()

    assert math.isnan(written["ok"]["ratio"])
    assert written["ok"]["at"] == "2026-01-01"


def test_each_kind_reads_as_its_model() -> None:
    kinds = [type(parse_outcome({"error": old}).failure) for old in OLD_FAILURES]

    assert [kind.__name__ for kind in kinds] == [
        "DriverFailure",
        "DriverFailure",
        "DriverFailure",
        "CredentialFailure",
        "BudgetFailure",
        "MovedOnFailure",
        "UncertainFailure",
        "UncertainFailure",
        "CallFailure",
        "CallFailure",
        "CallFailure",
        "CallFailure",
    ]


def test_a_budget_failure_keeps_its_amounts_as_decimal_strings() -> None:
    failure = BudgetFailure(
        message="m",
        scope="workflow:refund",
        period="2026-11",
        limit=Decimal("10.00"),
        spent=Decimal("0"),
        reserved=Decimal("0.10"),
        requested=Decimal("12.5"),
    )

    written = failure.model_dump(mode="json")

    assert (written["limit"], written["reserved"], written["requested"]) == (
        "10.00",
        "0.10",
        "12.5",
    )
    assert parse_failure(written) == failure


def test_an_old_step_failure_raises_step_failed() -> None:
    old = {
        "error": {
            "kind": "step",
            "message": "step `fetch` failed: ValueError: no",
            "error_type": "ValueError",
        }
    }

    outcome = parse_outcome(old)

    assert isinstance(outcome, Failed)
    assert outcome.failure == StepFailure(
        message="step `fetch` failed: ValueError: no", error_type="ValueError"
    )
    with pytest.raises(StepFailed) as raised:
        outcome.unwrap("fetch")
    assert (str(raised.value), raised.value.step, raised.value.error_type) == (
        "step `fetch` failed: ValueError: no",
        "fetch",
        "ValueError",
    )


def ledger_row(status: str, **values: Any) -> LedgerRow:
    """A ledger row of `status`, finished unless `started`, with `values` over its defaults."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    fields: dict[str, Any] = {
        "id": 1,
        "run_id": "r",
        "attempt": 1,
        "step_id": 4,
        "op_id": "shop.orders.create",
        "effect": "write",
        "idempotent": True,
        "idempotency_key": "r:4",
        "input_hash": "h",
        "status": status,
        "tries": 1,
        "actor": "user:ann",
        "started_at": at,
        "finished_at": None if status == "started" else at,
        "output": None,
        "error": None,
        "error_info": None,
        "cost": None,
    }
    return LedgerRow(**(fields | values))


@pytest.mark.parametrize("old", OLD_FAILURES, ids=lambda old: str(old["kind"]))
def test_an_old_ledger_row_reads_back_its_failure(old: dict[str, Any]) -> None:
    row = ledger_row("failed", error=old["message"], error_info=old)

    assert row.outcome == parse_outcome({"error": old})


def test_a_ledger_row_reads_back_its_output() -> None:
    assert ledger_row("ok", output={"order_id": "o_1"}).outcome == Ok(output={"order_id": "o_1"})


def test_a_failed_row_without_a_kind_fails_as_failed_with_its_error_text() -> None:
    bare = ledger_row("failed", error="it broke").outcome
    nothing = ledger_row("failed").outcome

    assert bare == Failed(failure=CallFailure(kind="failed", message="it broke"))
    assert nothing == Failed(failure=CallFailure(kind="failed", message="the call failed"))
    with pytest.raises(OpError, match=r"^it broke$"):
        bare.unwrap("shop.orders.create")


def test_a_rows_message_is_its_error_column() -> None:
    info = {"kind": "driver", "message": "old text", "retryable": False}

    outcome = ledger_row("failed", error="the row's text", error_info=info).outcome

    assert outcome == Failed(failure=DriverFailure(message="the row's text"))


def test_an_uncertain_failure_with_a_task_suspends_the_run() -> None:
    failure = UncertainFailure(message="m", idempotency_key="r:4", task_id="tsk_1")

    with pytest.raises(Suspended) as raised:
        Failed(failure=failure).unwrap("shop.orders.create")

    assert (raised.value.status, raised.value.task_id) == ("waiting", "tsk_1")


def test_a_driver_failure_is_read_as_leniently_as_drivers_write_it() -> None:
    # A vendor's numeric error code, a null flag and a status as text.
    recorded = {
        "kind": "driver",
        "message": "card declined",
        "retryable": None,
        "status": "402",
        "vendor_code": 42,
        "maybe_applied": 0,
    }
    raised = _raised(lambda: parse_outcome({"error": recorded}).unwrap("shop.charge"))

    assert isinstance(raised, DriverError)
    assert (raised.retryable, raised.status, raised.vendor_code, raised.maybe_applied) == (
        False,
        402,
        "42",
        False,
    )
    made = DriverFailure.of(DriverError("card declined", retryable=False, vendor_code=42))  # type: ignore[arg-type]
    assert made.vendor_code == "42"


def test_a_failure_its_model_cannot_read_still_fails_the_call_with_its_message() -> None:
    recorded = {"kind": "budget", "message": "over the limit", "scope": "app"}

    raised = _raised(lambda: parse_outcome({"error": recorded}).unwrap("llm.chat.complete"))

    assert type(raised) is OpError
    assert str(raised) == "over the limit"
    assert isinstance(parse_failure(recorded), CallFailure)
