"""`remit try`: a workflow run once on fresh fakes in a throwaway database, its steps and calls
printed (or one `SandboxResult` as JSON), and nothing of it in the live database.

The payments fake holds the invoices inv_1001 (open, 45 days overdue on the desk's date),
inv_1002 (paid) and inv_1003 (open) from the start, so a fresh sandbox has them too.
"""

from __future__ import annotations

import json
import time

from remit.agent.sandbox import SandboxResult
from tests.e2e.cli_support import CRASH_APP, Cli

CHASE = {"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}
WRITE_OFF = {"invoice_id": "inv_1003", "reason": "customer in administration"}


def test_a_write_off_waits_at_its_approval_and_the_live_database_never_sees_it(cli: Cli) -> None:
    printed = cli("try", "ar.write-off", "--input", json.dumps(WRITE_OFF)).stdout

    lines = [" ".join(line.split()) for line in printed.splitlines()]
    assert lines[0] == "ar.write-off on fresh fakes, in a throwaway database: waiting"
    assert "waits for approval write-off: Write off 612.50 EUR on inv_1003" in printed
    steps = lines[lines.index("steps") + 2 : lines.index("calls")]
    assert steps == [
        "1 payments.invoices.get ok payments.invoices.get",
        "2 approval:write-off ok -",
    ]
    calls = lines[lines.index("calls") + 2 :]
    assert calls[0] == 'payments.invoices.get read {"invoice_id": "inv_1003"}'
    # REMIT_DATABASE_URL names the live database: the sandbox made no run there, opened no
    # gate and called nothing.
    assert cli("runs", "--quiet").stdout == ""
    assert cli("approvals", "--quiet").stdout == ""
    assert cli("ledger", "--json").stdout.strip() == "[]"


def test_a_chase_sends_its_mail_through_the_fake_and_prints_a_sandbox_result(cli: Cli) -> None:
    printed = cli("try", "ar.chase-invoice", "--input", json.dumps(CHASE), "--json").stdout

    result = SandboxResult.model_validate_json(printed)
    assert (result.workflow, result.status, result.error, result.waiting) == (
        "ar.chase-invoice",
        "done",
        None,
        [],
    )
    assert result.input == {**CHASE, "as_of": "2026-11-29"}
    assert result.output == {
        "invoice_id": "inv_1001",
        "outcome": "final reminder sent",
        "days_overdue": 45,
        "message_id": "msg_0001",
    }
    assert [(s.position, s.name, s.status, s.op) for s in result.steps] == [
        (1, "payments.invoices.get", "ok", "payments.invoices.get"),
        (2, "days-overdue", "ok", None),
        (3, "llm.chat.complete", "ok", "llm.chat.complete"),
        (4, "mail.messages.send", "ok", "mail.messages.send"),
        (5, "payments.invoices.record_reminder", "ok", "payments.invoices.record_reminder"),
        (6, "data.ar.contacts.get", "ok", "data.ar.contacts.get"),
        (7, "data.ar.contacts.put", "ok", "data.ar.contacts.put"),
    ]
    assert [(call.op, call.effect) for call in result.calls] == [
        ("payments.invoices.get", "read"),
        ("llm.chat.complete", "read"),
        ("mail.messages.send", "write"),
        ("payments.invoices.record_reminder", "write"),
        ("data.ar.contacts.get", "read"),
        ("data.ar.contacts.put", "write"),
    ]
    mail = result.calls[2]
    assert mail.input["to"] == "ap@northwind.example"
    assert mail.input["subject"] == "Invoice inv_1001: 1,280.00 EUR is 45 days overdue"
    assert mail.output == {"message_id": "msg_0001", "to": "ap@northwind.example"}
    assert result.calls[3].input == {
        "invoice_id": "inv_1001",
        "reminders_sent": 1,
        "note": "final reminder msg_0001",
    }
    assert cli("runs", "--quiet").stdout == ""


def test_an_unknown_workflow_a_bad_input_or_a_refused_start_exits_1_naming_it(cli: Cli) -> None:
    unknown = cli("try", "ar.chase", "--input", "{}", check=False)
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert "error: app `acme` has no workflow `ar.chase` (it has: " in unknown.stderr
    assert "ar.chase-invoice" in unknown.stderr

    bad = cli("try", "ar.write-off", "--input", '{"reason": 7}', check=False)
    assert bad.returncode == 1
    assert "input to workflow `ar.write-off` does not parse: invoice_id: Field required" in (
        bad.stderr
    )
    assert "reason: Input should be a valid string" in bad.stderr

    refused = cli(
        "try", "ar.write-off", "--input", json.dumps(WRITE_OFF), "--as", "user:dave", check=False
    )
    assert refused.returncode == 1
    assert 'error: user:dave may not start Workflow::"ar.write-off"' in refused.stderr

    apply = cli("try", "apply", "--as", "user:sam", check=False)
    assert apply.returncode == 1
    assert "error: `apply` is remit's own workflow, which binds the declared resources" in (
        apply.stderr
    )


def test_a_run_that_does_not_rest_within_the_timeout_is_shown_as_it_stands(cli: Cli) -> None:
    (cli.tmp / "hold-between").touch()  # the payout's step waits there until it is killed

    began = time.monotonic()
    printed = cli(
        "try",
        "payout",
        "--input",
        '{"account": "a", "amount": 10}',
        "--timeout",
        "1",
        "--json",
        app=CRASH_APP,
    ).stdout

    assert time.monotonic() - began < 30
    result = SandboxResult.model_validate_json(printed)
    assert result.status == "running"
    assert result.waiting == [
        "its running attempt: the sandbox stopped waiting after 1 s, before the run rested "
        "(--timeout waits longer)"
    ]
    assert [call.op for call in result.calls] == ["bank.accounts.read", "bank.transfers.create"]
