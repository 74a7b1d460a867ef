"""The sandbox beside a live instance: `try_workflow` runs a chase that sends mail, counts a
reminder and keeps a contact, and shows each of those calls with what it was sent, while the
live instance's ledger, budgets, collections and fakes' journals stay byte for byte as they
were, though the caller's environment names the live database and fakes folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit import load_app
from remit.agent.sandbox import SandboxResult, try_workflow
from remit.connectors.base import CallContext
from remit.core.errors import RemitError
from remit.testing import Harness
from tests.e2e.cli_support import ACME

CHASE = {"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}
# What the live instance keeps that a run changes: its runs, calls, spend, collections and gates.
LIVE_TABLES = (
    "remit_runs",
    "remit_ledger",
    "remit_budget_periods",
    "remit_reservations",
    "remit_data",
    "remit_approvals",
    "remit_denials",
)


def _rows(harness: Harness) -> dict[str, list[tuple[Any, ...]]]:
    with harness.client.db.engine.connect() as conn:
        return {
            table: [tuple(row) for row in conn.execute(sa.text(f"SELECT * FROM {table}"))]
            for table in LIVE_TABLES
        }


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _a_dns_record(live: Harness) -> None:
    """A record at the live DNS fake, which journals it in the live fakes folder (a resource's
    op is apply's alone to call, so the test calls the fake as apply would)."""
    op = live.app.ops["dns.record.create"]
    desired = {"zone": "acme.test", "name": "desk", "type": "A", "content": "10.0.0.7"}
    call = CallContext(
        op=op, idempotency_key="live-dns-1", run_id="test", attempt=1, actor="user:sam"
    )
    live.fake("dns").invoke(op, op.input.model_validate({"desired": desired}), call)


@pytest.fixture
def live_fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The live instance's fakes folder, as `REMIT_FAKES_DIR` names it in this process."""
    folder = tmp_path / "live-fakes"
    monkeypatch.setenv("REMIT_FAKES_DIR", str(folder))
    return folder


def test_a_sandboxed_chase_shows_its_calls_and_leaves_the_live_instance_as_it_was(
    database_url: str, live_fakes: Path
) -> None:
    desk = load_app(ACME)
    with Harness(desk, database_url=database_url, actor="user:ann") as live:
        chased = live.run("ar.chase-invoice", {"invoice_id": "inv_1003"})
        assert chased.status == "done"
        _a_dns_record(live)
        rows, files = _rows(live), _files(live_fakes)
        assert all(rows[table] for table in ("remit_ledger", "remit_budget_periods", "remit_data"))
        assert files["dns.jsonl"]
        mail_sent = len(live.fake("mail").effects)

        result = try_workflow(
            ACME,
            "ar.chase-invoice",
            CHASE,
            by="user:ann",
            environ={
                **os.environ,
                "REMIT_DATABASE_URL": database_url,
                "REMIT_FAKES_DIR": str(live_fakes),
            },
        )

        assert _rows(live) == rows
        assert _files(live_fakes) == files
        assert len(live.fake("mail").effects) == mail_sent

    assert isinstance(result, SandboxResult)
    assert (result.workflow, result.status, result.waiting) == ("ar.chase-invoice", "done", [])
    assert [call.op for call in result.calls] == [
        "payments.invoices.get",
        "llm.chat.complete",
        "mail.messages.send",
        "payments.invoices.record_reminder",
        "data.ar.contacts.get",
        "data.ar.contacts.put",
    ]
    by_op = {call.op: call for call in result.calls}
    assert by_op["payments.invoices.get"].input == {"invoice_id": "inv_1001"}
    sent = by_op["mail.messages.send"]
    assert sent.effect == "write"
    assert sent.input["to"] == "ap@northwind.example"
    assert sent.input["subject"] == "Invoice inv_1001: 1,280.00 EUR is 45 days overdue"
    # A fresh fake: the sandbox's first message, though the live mail fake has sent one.
    assert sent.output == {"message_id": "msg_0001", "to": "ap@northwind.example"}
    assert by_op["data.ar.contacts.put"].input == {
        "email": "ap@northwind.example",
        "reminders": 1,
        "last_chased": "2026-11-29",
        "note": "",
    }
    assert [step.op for step in result.steps if step.op] == [call.op for call in result.calls]


def test_a_sandbox_that_cannot_run_raises_naming_the_workflow_and_quoting_why() -> None:
    with pytest.raises(RemitError) as refused:
        try_workflow(ACME, "ar.chase", {}, by="user:ann")
    said = str(refused.value)
    assert said.startswith("the sandbox could not run `ar.chase` (`remit try` exited 1):\n")
    assert "error: app `acme` has no workflow `ar.chase`" in said

    with pytest.raises(RemitError) as bad:
        try_workflow(ACME, "ar.write-off", {"reason": "x"}, by="user:ann")
    assert "invoice_id: Field required" in str(bad.value)
