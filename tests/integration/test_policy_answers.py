"""A `Guard` whose policies answer a request from what they kept (`Policy.check`) still does
what it did: every refusal is recorded, and a start is checked and refused as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit import PolicyDenied
from remit.app import load_app
from remit.core.database import Database
from remit.core.runs import RunStore, parse_input
from remit.core.schema import denials, runs
from remit.policy.guard import Guard

ACME = Path(__file__).parent.parent.parent / "examples" / "acme"
INPUT = {"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}


def _denials(db: Database) -> list[Any]:
    with db.engine.connect() as conn:
        return list(conn.execute(sa.select(denials).order_by(denials.c.at)).all())


def _runs(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())


def test_a_refusal_answered_again_is_recorded_again(db: Database) -> None:
    app = load_app(ACME)
    guard = Guard.of(app, db)
    client = db.client(app.name)
    store = RunStore(db, app=app.name)
    wf = app.workflow("ar.chase-invoice")
    try:
        for _ in range(3):
            guard.start(store, client, wf, INPUT, by="user:ann")
            with pytest.raises(PolicyDenied, match="no policy permits it"):
                guard.start(store, client, wf, INPUT, by="user:dave")
            assert not guard.check("user:dave", "start", wf.name, {"input": INPUT}).allowed
    finally:
        client.destroy()
    assert _runs(db) == 3
    recorded = _denials(db)
    assert [(r.principal, r.action, r.resource) for r in recorded] == [
        ("user:dave", "start", "ar.chase-invoice")
    ] * 6
    # The start records the input as parsed, the check as given.
    parsed = {"input": parse_input(wf, INPUT)}
    assert [r.context for r in recorded] == [parsed, {"input": INPUT}] * 3
