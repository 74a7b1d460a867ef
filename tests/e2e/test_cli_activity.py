"""`remit activity TYPE ID` from the command line: an invoice's chase and write-off, from their
starts through the write-off's gate to their ends, as a user reads them."""

from __future__ import annotations

from tests.e2e.cli_support import Cli


def test_activity_lists_what_happened_about_an_invoice_oldest_first(cli: Cli) -> None:
    # A chase run in this process (`remit run`), then a write-off a worker serves.
    chase = cli(
        "run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1003"}', "--timeout", "60"
    )
    assert "done" in chase.stdout + chase.stderr
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    cli(
        "approve",
        approval,
        "--as",
        "user:carol",
        "--edit",
        '{"amount": 50000}',
        "--reason",
        "settled with the administrator",
    )
    cli.wait_for(run_id, "done")

    printed = cli("activity", "invoice", "inv_1003").stdout
    # A row's first line begins with its number; a long "what" wraps onto lines of its own.
    lines = [line.split() for line in printed.splitlines()[1:] if line.split()[0].isdigit()]
    # Columns: row, date, time, kind, actor, run, what.
    assert [(line[3], line[4]) for line in lines] == [
        ("run.started", "user:ann"),
        ("run.done", "remit:run"),
        ("run.started", "user:ann"),
        ("approval.opened", "user:ann"),
        ("approval.approved", "user:carol"),
        ("run.done", "remit:run"),
    ]
    header = printed.splitlines()[0].split()
    assert header == ["#", "time", "kind", "actor", "run", "what"]
    assert [line[5] for line in lines[2:]] == [run_id] * 4
    assert "ar.chase-invoice done" in printed
    whole = " ".join(printed.split())
    assert "approved with edits via cli: settled with the administrator" in whole
    assert "ar.write-off done" in printed

    after = cli("activity", "invoice", "inv_1003", "--after", lines[3][0]).stdout
    assert [line.split()[3] for line in after.splitlines()[1:] if line.split()[0].isdigit()] == [
        "approval.approved",
        "run.done",
    ]
    nothing = cli("activity", "invoice", "inv_0000")
    assert nothing.stdout.strip() == "no activity for invoice inv_0000"
    refused = cli("activity", "invoice", "", check=False)
    assert refused.returncode == 1
    assert "its id is empty" in refused.stderr


def test_activity_shows_each_retry_between_the_failures(cli: Cli) -> None:
    failed = cli("run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_404"}', check=False)
    assert failed.returncode == 1
    run_id = failed.stderr.split()[1]
    retried = cli("retry", run_id, "--as", "user:carol").stdout
    assert "attempt 2" in retried, retried
    cli.worker()
    cli.wait_for(run_id, "failed")  # the invoice is still missing: it fails again

    printed = cli("activity", "invoice", "inv_404").stdout
    lines = [line.split() for line in printed.splitlines()[1:] if line.split()[0].isdigit()]
    assert [(line[3], line[4]) for line in lines] == [
        ("run.started", "user:ann"),
        ("run.failed", "remit:run"),
        ("run.retried", "user:carol"),
        ("run.failed", "remit:run"),
    ]
    whole = " ".join(printed.split())
    assert "ar.chase-invoice failed, retried from step 1 on attempt 2" in whole
