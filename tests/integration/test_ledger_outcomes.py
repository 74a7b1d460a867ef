"""The ledger keeps a call's outcome typed: `finish` stores a failure in the form earlier
versions wrote, and a row an earlier version wrote reads back as the same outcome."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from remit.core.database import Database
from remit.core.ledger import CallRecord, LedgerStore
from remit.core.outcome import (
    BudgetFailure,
    CallFailure,
    DriverFailure,
    Failed,
    Ok,
    UncertainFailure,
    parse_outcome,
)
from remit.core.schema import ledger


def _record(key: str, effect: str = "write") -> CallRecord:
    return CallRecord(
        run_id="r",
        attempt=1,
        step_id=4,
        op_id="shop.orders.create",
        effect=effect,
        idempotent=False,
        idempotency_key=key,
        input_hash="h",
        actor="user:ann",
    )


def _old_row(db: Database, key: str, status: str, **values: Any) -> None:
    """A finished row as an earlier version of remit wrote it."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with db.begin() as conn:
        conn.execute(
            ledger.insert().values(
                **_record(key).__dict__,
                status=status,
                tries=1,
                started_at=at,
                finished_at=at,
                **values,
            )
        )


OLD_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("ok", {"output": {"order_id": "o_1", "lines": [1, 2]}}),
    (
        "failed",
        {
            "error": "card declined",
            "error_info": {
                "kind": "driver",
                "message": "card declined",
                "retryable": False,
                "status": 402,
                "vendor_code": "card_declined",
                "maybe_applied": False,
            },
        },
    ),
    (
        "failed",
        {
            "error": "over budget",
            "error_info": {
                "kind": "budget",
                "message": "over budget",
                "scope": "app",
                "period": "2026-11",
                "limit": "10.00",
                "spent": "9.95",
                "reserved": "0",
                "requested": "0.10",
            },
        },
    ),
    (
        "failed",
        {
            "error": "did not happen",
            "error_info": {"kind": "not_done", "message": "did not happen", "task_id": "tsk_1"},
        },
    ),
    ("failed", {"error": "it broke", "error_info": None}),
]


@pytest.mark.parametrize(("status", "values"), OLD_ROWS, ids=lambda v: str(v)[:24])
def test_a_row_an_earlier_version_wrote_reads_back_its_outcome(
    db: Database, status: str, values: dict[str, Any]
) -> None:
    _old_row(db, "r:4", status, **values)

    row = LedgerStore(db).get("r:4")

    assert row is not None
    if status == "ok":
        assert row.outcome == Ok(output=values["output"])
    elif values["error_info"] is None:
        assert row.outcome == Failed(failure=CallFailure(message="it broke"))
    else:
        assert row.outcome == parse_outcome({"error": values["error_info"]})


def _raw(db: Database, key: str) -> sa.Row[Any]:
    query = sa.select(ledger.c.status, ledger.c.output, ledger.c.error, ledger.c.error_info)
    with db.engine.connect() as conn:
        return conn.execute(query.where(ledger.c.idempotency_key == key)).one()


def test_finish_stores_a_failure_in_the_form_earlier_versions_read(db: Database) -> None:
    store = LedgerStore(db)
    refused = BudgetFailure(
        message="over budget",
        scope="workflow:refund",
        period="2026-11",
        limit=Decimal("10.00"),
        spent=Decimal("9.95"),
        reserved=Decimal("0"),
        requested=Decimal("0.10"),
    )

    assert store.finish(_record("r:5", "read"), Failed(failure=refused), tries=0)

    raw = _raw(db, "r:5")
    assert (raw.status, raw.output, raw.error) == ("failed", None, "over budget")
    assert raw.error_info == {
        "kind": "budget",
        "message": "over budget",
        "scope": "workflow:refund",
        "period": "2026-11",
        "limit": "10.00",
        "spent": "9.95",
        "reserved": "0",
        "requested": "0.10",
    }
    row = store.get("r:5")
    assert row is not None
    assert row.outcome == Failed(failure=refused)


def test_finish_stores_an_output_and_clears_the_failure(db: Database) -> None:
    store = LedgerStore(db)
    with db.begin() as conn:
        conn.execute(
            ledger.insert().values(
                **_record("r:6").__dict__,
                status="started",
                tries=0,
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )

    assert store.finish(_record("r:6"), Ok(output={"order_id": "o_6"}), tries=2)

    raw = _raw(db, "r:6")
    assert (raw.status, raw.output, raw.error, raw.error_info) == (
        "ok",
        {"order_id": "o_6"},
        None,
        None,
    )


def test_finish_refuses_a_key_that_belongs_to_another_call(db: Database) -> None:
    store = LedgerStore(db)
    _old_row(db, "r:7", "ok", output={"order_id": "o_7"})
    other = CallRecord(**{**_record("r:7").__dict__, "op_id": "shop.refunds.create"})
    failure = DriverFailure(message="declined", status=402)

    assert not store.finish(other, Failed(failure=failure), tries=1)
    row = store.get("r:7")
    assert row is not None
    assert row.outcome == Ok(output={"order_id": "o_7"})


def test_an_uncertain_row_reads_back_as_waiting_on_its_task(db: Database) -> None:
    info = {"kind": "uncertain", "message": "unknown", "idempotency_key": "r:8", "task_id": "t"}
    _old_row(db, "r:8", "uncertain", error="unknown", error_info=info)

    row = LedgerStore(db).get("r:8")

    assert row is not None
    assert row.outcome == Failed(
        failure=UncertainFailure(message="unknown", idempotency_key="r:8", task_id="t")
    )
