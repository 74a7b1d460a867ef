"""Every act a person or an agent takes goes through the policies, in the client, for every
surface: refused, it writes a denial row and changes nothing; allowed, it writes one audit row.
The acts checked here are the ones that had no policy before (cancel, pause, resume, the secrets,
a budget's limit, a reconciler pass), on the example desk, whose policies give each to a role:
clerks start and resolve, controllers decide, set budgets and look after runs, admins keep the
secrets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit import Client, PolicyDenied
from remit.core.schema import audit, denials, runs, secrets
from tests.e2e.cli_support import ACME

# A principal the desk's policies name in no group: refused everything.
DAVE = "user:dave"


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[Client]:
    environ = {"REMIT_SECRET_KEY_FILE": str(tmp_path / "secret.key")}
    with Client.connect(ACME, database_url, by="user:ann", environ=environ) as client:
        yield client


def _rows(client: Client, table: sa.Table) -> list[dict[str, Any]]:
    """The table's rows; the audit's without the starts of the runs a test sets up."""
    query = sa.select(table)
    if table is audit:
        query = query.where(audit.c.action != "run.started")
    with client.db.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def _started(client: Client) -> str:
    return client.runs.start("ar.chase-invoice", {"invoice_id": "inv_1001"}).run_id


# Each act: what it does as `by`, the principal the desk allows it to, the Cedar action and
# resource it is checked as, and the audit row it leaves (action, target) when allowed.
Act = Callable[[Client, str], object]
ACTS: list[tuple[str, Act, str, str, str, str]] = [
    (
        "cancel",
        lambda c, by: c.runs.cancel(_started(c), by=by),
        "user:carol",
        "Workflow",
        "ar.chase-invoice",
        "run.cancelled",
    ),
    ("pause", lambda c, by: c.ops.pause(by=by), "user:carol", "App", "acme", "app.paused"),
    ("resume", lambda c, by: c.ops.resume(by=by), "user:carol", "App", "acme", "app.resumed"),
    (
        "set_secret",
        lambda c, by: c.secrets.set("MAIL_SERVER_TOKEN", "s3cret", by=by),
        "user:sam",
        "Secret",
        "MAIL_SERVER_TOKEN",
        "secret.set",
    ),
    (
        "set_budget",
        lambda c, by: c.budgets.set("app", 1_000_000, by=by),
        "user:carol",
        "Budget",
        "app",
        "budget.set_limit",
    ),
]


@pytest.mark.parametrize(
    ("action", "act", "allowed", "kind", "resource", "audited"),
    ACTS,
    ids=[each[0] for each in ACTS],
)
def test_an_act_is_refused_with_a_denial_and_allowed_with_one_audit_row(
    client: Client, action: str, act: Act, allowed: str, kind: str, resource: str, audited: str
) -> None:
    before = _rows(client, audit)
    with pytest.raises(PolicyDenied, match=f'{DAVE} may not {action} {kind}::"{resource}"'):
        act(client, DAVE)
    (denial,) = _rows(client, denials)
    assert (denial["principal"], denial["action"], denial["resource"]) == (DAVE, action, resource)
    assert _rows(client, audit) == before  # nothing done, nothing audited

    act(client, allowed)
    written = [row for row in _rows(client, audit) if row not in before]
    assert [(row["action"], row["actor"]) for row in written] == [(audited, allowed)]
    assert len(_rows(client, denials)) == 1


def test_a_refused_act_changes_nothing(client: Client) -> None:
    run_id = _started(client)
    with pytest.raises(PolicyDenied):
        client.runs.cancel(run_id, by=DAVE)
    with pytest.raises(PolicyDenied):
        client.ops.pause(by=DAVE)
    with pytest.raises(PolicyDenied):
        client.secrets.set("MAIL_SERVER_TOKEN", "forged", by=DAVE)
    with pytest.raises(PolicyDenied):
        client.budgets.set("app", 1_000_000, by=DAVE)
    assert [row["status"] for row in _rows(client, runs)] == ["queued"]
    assert not client.services.app_state.paused()
    assert _rows(client, secrets) == []
    (period,) = client.services.budgets.periods()
    assert period.limit_usd == Decimal("5.00")


def test_clerks_may_not_do_what_controllers_and_admins_do(client: Client) -> None:
    with pytest.raises(PolicyDenied, match='user:ann may not set_budget Budget::"app"'):
        client.budgets.set("app", 50, by="user:ann")
    with pytest.raises(PolicyDenied, match='user:carol may not set_secret Secret::"MAIL_FROM"'):
        client.secrets.set("MAIL_FROM", "desk@example.com", by="user:carol")
    with pytest.raises(PolicyDenied, match='user:sam may not pause App::"acme"'):
        client.ops.pause(by="user:sam")


def test_deleting_a_secret_and_a_reconciler_pass_are_checked_and_audited(client: Client) -> None:
    client.secrets.set("MAIL_FROM", "desk@example.com", by="user:sam")
    with pytest.raises(PolicyDenied, match='may not delete_secret Secret::"MAIL_FROM"'):
        client.secrets.delete("MAIL_FROM", by="user:carol")
    assert client.secrets.delete("MAIL_FROM", by="user:sam") is True
    with pytest.raises(PolicyDenied, match='user:ann may not reconcile App::"acme"'):
        client.ops.reconcile(by="user:ann")
    client.ops.reconcile(by="user:carol")
    assert [(row["action"], row["target"], row["actor"]) for row in _rows(client, audit)] == [
        ("secret.set", "secret:MAIL_FROM", "user:sam"),
        ("secret.deleted", "secret:MAIL_FROM", "user:sam"),
        ("app.reconciled", "app:acme", "user:carol"),
    ]
    assert [row["action"] for row in _rows(client, denials)] == ["delete_secret", "reconcile"]


def test_a_secret_is_never_in_its_audit_row(client: Client) -> None:
    client.secrets.set("MAIL_SERVER_TOKEN", "tok_live_0123456789", by="user:sam")
    (row,) = _rows(client, audit)
    assert "tok_live_0123456789" not in repr(row)


def test_a_start_and_a_direct_call_are_audited_as_every_act_is(client: Client) -> None:
    run_id = _started(client)
    client.calls.call("payments.invoices.get", {"invoice_id": "inv_1001"}, by="user:ann")
    with client.db.engine.connect() as conn:
        rows = conn.execute(sa.select(audit.c.action, audit.c.actor, audit.c.target)).all()
    assert [(action, actor) for action, actor, _ in rows] == [
        ("run.started", "user:ann"),
        ("op.called", "user:ann"),
    ]
    assert rows[0].target == run_id
    with pytest.raises(PolicyDenied):
        client.calls.call("payments.invoices.get", {"invoice_id": "inv_1001"}, by=DAVE)
    with client.db.engine.connect() as conn:
        assert len(conn.execute(sa.select(audit)).all()) == 2
