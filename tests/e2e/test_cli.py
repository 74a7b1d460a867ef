"""The `remit` command as a user runs it: exit codes, what it prints, what it leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import remit
from remit.core.runs import RunStore
from remit.core.schema import runs as runs_table
from tests.e2e.cli_support import ACME, CRASH_APP, Cli
from tests.forked import run_remit


def test_start_list_serve_show_and_ledger(cli: Cli) -> None:
    run_id = cli(
        "start", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}'
    ).stdout.strip()
    assert run_id.startswith("run_")
    listed = cli("runs").stdout
    assert run_id in listed
    assert "queued" in listed
    assert "user:ann" in listed

    cli.worker()
    cli.wait_for(run_id, "done")

    shown = cli("show", run_id).stdout
    assert "done" in shown
    for step in (
        "payments.invoices.get",
        "days-overdue",
        "llm.chat.complete",
        "mail.messages.send",
        "payments.invoices.record_reminder",
        "data.ar.contacts.get",
        "data.ar.contacts.put",
    ):
        assert step in shown
    assert "final reminder sent" in shown
    assert f"{run_id}:4" in shown  # the mail call's idempotency key, in the ledger

    ledger = cli("ledger", "--run", run_id).stdout
    assert ledger.count(run_id) == 6
    assert "uncertain" not in ledger
    assert cli("runs", "--status", "done").stdout.count(run_id) == 1
    assert (
        cli("cancel", run_id, "--as", "user:carol").stdout.strip()
        == f"{run_id} had already finished: done"
    )


def test_run_in_the_foreground_prints_steps_and_ledger(cli: Cli) -> None:
    done = cli("run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}')
    assert "done" in done.stdout
    assert "mail.messages.send" in done.stdout
    assert "ledger" in done.stdout
    assert "steps" in done.stdout


def test_a_run_that_fails_exits_1(cli: Cli) -> None:
    done = cli("run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_404"}', check=False)
    assert done.returncode == 1
    assert "failed" in done.stdout
    assert "no invoice inv_404" in done.stdout


def test_cancel_a_queued_run(cli: Cli) -> None:
    run_id = cli(
        "start", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}'
    ).stdout.strip()
    assert cli("cancel", run_id, "--as", "user:carol").stdout.strip() == f"{run_id} cancelled"
    assert "cancelled" in cli("show", run_id).stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["start", "ar.chase-invoice", "--input", "{invoice"], "--input is not valid JSON"),
        (["start", "ar.chase-invoice", "--input", "{}"], "invoice_id: Field required"),
        (
            ["start", "chase-everyone"],
            "has no workflow `chase-everyone` (it has: apply, ar.chase-invoice, ar.credit-line, ar.credit-note, ar.dunning, ar.follow-up, ar.write-off, call, change, chat, drift)",
        ),
        (["show", "run_missing"], "no run `run_missing`"),
        (["cancel", "run_missing"], "no run `run_missing`"),
    ],
)
def test_bad_input_exits_1_with_a_message_and_writes_nothing(
    cli: Cli, args: list[str], message: str
) -> None:
    done = cli(*args, check=False)
    assert done.returncode == 1
    assert message in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr
    assert cli("runs").stdout.strip() == "no runs"


def test_an_app_folder_that_does_not_exist(cli: Cli, tmp_path: Path) -> None:
    done = cli("runs", app=tmp_path / "nowhere", check=False)
    assert done.returncode == 1
    assert "no such folder" in done.stderr


def test_two_workers_on_one_host_take_distinct_executor_ids(cli: Cli) -> None:
    cli.worker()
    cli.worker()
    deadline = time.monotonic() + 60
    while not all("serving" in cli.log(i) for i in (0, 1)):
        assert time.monotonic() < deadline, cli.log(0) + cli.log(1)
        time.sleep(0.1)
    ids = {
        line.split()[1]
        for i in (0, 1)
        for line in cli.log(i).splitlines()
        if line.startswith("worker ")
    }
    assert len(ids) == 2
    assert {executor.rsplit("-", 1)[1] for executor in ids} == {"0", "1"}


def test_sigterm_lets_running_work_finish_then_exits(cli: Cli) -> None:
    (cli.tmp / "slow-between").write_text("2")
    worker = cli.worker(CRASH_APP)
    run_id = cli.start_payout_and_wait_between()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, cli.log(0)
    assert RunStore(cli.db).get(run_id).status == "done"
    assert "draining" in cli.log(0)


def test_a_second_sigterm_while_draining_is_ignored(cli: Cli) -> None:
    (cli.tmp / "slow-between").write_text("120")  # held until the second SIGTERM is heard
    worker = cli.worker(CRASH_APP)
    run_id = cli.start_payout_and_wait_between()
    worker.send_signal(signal.SIGTERM)
    cli.wait_in_log(0, "draining")
    worker.send_signal(signal.SIGTERM)
    cli.wait_in_log(0, "received SIGTERM again while draining: ignored")
    (cli.tmp / "slow-between").unlink()
    assert worker.wait(30) == 0, cli.log(0)
    assert "received SIGTERM again while draining: ignored" in cli.log(0)
    assert RunStore(cli.db).get(run_id).status == "done"  # the drain went on to its end


def test_sigterm_past_the_drain_bound_exits_and_the_next_worker_completes_the_run(cli: Cli) -> None:
    cli.env["REMIT_DRAIN_TIMEOUT"] = "1"
    (cli.tmp / "slow-between").write_text("30")
    worker = cli.worker(CRASH_APP)
    run_id = cli.start_payout_and_wait_between()
    stopping = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0, cli.log(0)
    assert time.monotonic() - stopping < 10
    assert RunStore(cli.db).get(run_id).status == "running"

    (cli.tmp / "slow-between").unlink()
    cli.worker(CRASH_APP)
    cli.wait_for(run_id, "done")
    journal = (cli.tmp / "journal.jsonl").read_text().splitlines()
    transfers = [line for line in journal if "bank.transfers.create" in line]
    assert len(transfers) == 2


def test_app_may_follow_the_command(cli: Cli) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "remit", "runs", "--app", str(ACME)],
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no runs"


def test_an_unknown_status_or_run_is_an_error_not_an_empty_list(cli: Cli) -> None:
    done = cli("runs", "--status", "bogus", check=False)
    assert done.returncode == 1
    assert "--status 'bogus' is not a run status" in done.stderr
    assert "queued, running, waiting" in " ".join(done.stderr.split())
    done = cli("ledger", "--run", "run_nope", check=False)
    assert done.returncode == 1
    assert "no run `run_nope`" in done.stderr


def test_reconcile_reports_and_with_dry_run_changes_nothing(cli: Cli) -> None:
    assert cli("reconcile", "--as", "user:carol").stdout.strip() == "nothing to do"
    done = cli("run", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}')
    run_id = done.stderr.split("started ", 1)[1].split()[0]
    with cli.db.begin() as conn:  # the window: the attempt ended, the run was never marked
        conn.execute(
            runs_table.update().where(runs_table.c.run_id == run_id).values(status="running")
        )

    planned = cli("reconcile", "--dry-run", "--as", "user:carol").stdout
    assert "the pass would do 1 action:" in planned
    assert run_id in planned
    assert "conclude" in planned
    assert RunStore(cli.db).get(run_id).status == "running"

    assert "the pass did 1 action:" in cli("reconcile", "--as", "user:carol").stdout
    assert RunStore(cli.db).get(run_id).status == "done"


def test_an_expected_failure_is_one_line_with_its_traceback_at_debug(cli: Cli) -> None:
    del cli.env["REMIT_FAKES"]  # the drivers: the payments key is missing
    chase = '{"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}'
    done = cli("run", "ar.chase-invoice", "--input", chase, check=False)
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert "WARNING" in output
    assert "a run failed: MissingCredential: op `payments.invoices.get` needs" in output
    assert "Traceback" not in output

    cli.env["REMIT_LOG_LEVEL"] = "DEBUG"
    again = cli("run", "ar.chase-invoice", "--input", chase, check=False)
    assert again.returncode == 1
    assert "Traceback" in again.stdout + again.stderr


def test_version(cli: Cli) -> None:
    done = cli("--version")
    assert done.stdout.strip() == f"remit {remit.__version__}"


def test_a_database_that_does_not_answer_is_one_readable_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    env["REMIT_DATABASE_URL"] = "postgresql://nobody:s3cret@127.0.0.1:1/remit"
    done = run_remit(["--app", str(ACME), "runs"], env=env)
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(
        "error: cannot reach the database at postgresql://nobody@127.0.0.1:1/remit (connection "
        "failed: "
    )
    assert line.endswith(
        "accepting TCP/IP connections?): check REMIT_DATABASE_URL, and that the server is up "
        "and takes connections there"
    )
    for shown_not in ("\\n", "\\t", "s3cret", "***", "+psycopg"):  # lines joined, no secret
        assert shown_not not in line
