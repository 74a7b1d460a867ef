"""Tasks from the command line: a write whose outcome is unknown waits for a person, and
`remit task resolve` carries its run on.

A worker is killed inside the crash app's non-idempotent `bank.letters.post`, after the bank
posted the letter or before it did; a second worker recovers the run, which waits at the
letter's task until a person answers it.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from remit.core.ledger import LedgerStore
from remit.core.runs import RunStore
from tests.e2e.cli_support import CRASH_APP, Cli


def _open_task(cli: Cli, run_id: str) -> str:
    """Wait for the run to wait at a task, and return the task's id from `remit tasks`."""
    cli.wait_for(run_id, "waiting")
    listed = cli("tasks", "--open", "--run", run_id, app=CRASH_APP).stdout
    (line,) = [line for line in listed.splitlines() if line.strip().startswith("tsk_")]
    return line.split()[0]


def _letter_cut_off(cli: Cli, point: str = "bank.letters.post") -> str:
    """A payout whose worker is killed inside `bank.letters.post`: after the bank posted it
    (`point` is the op's), or before (`sending-letter`). A second worker recovers the run,
    which then waits at the letter's task."""
    (cli.tmp / f"hold-{point}").touch()
    first = cli.worker(CRASH_APP)
    run_id = cli(
        "start", "payout", "--input", '{"account": "a", "amount": 10}', app=CRASH_APP
    ).stdout.strip()
    deadline = time.monotonic() + 60
    while not (cli.tmp / f"reached-{point}").exists():
        assert time.monotonic() < deadline, cli.log(0)
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    (cli.tmp / f"hold-{point}").unlink()
    cli.worker(CRASH_APP)
    return run_id


def _letters(cli: Cli) -> list[dict[str, Any]]:
    journal = cli.tmp / "journal.jsonl"
    effects = [json.loads(line) for line in journal.read_text().splitlines() if line]
    return [e for e in effects if e["op"] == "bank.letters.post"]


def test_a_cut_off_write_is_listed_shown_and_resolved_done(cli: Cli) -> None:
    run_id = _letter_cut_off(cli)
    task_id = _open_task(cli, run_id)

    listed = cli("tasks", app=CRASH_APP).stdout
    assert task_id in listed
    assert run_id in listed
    assert "bank.letters.post" in listed
    assert f"{run_id}:5" in listed
    assert "open" in listed
    assert "Did bank.letters.post happen?" in listed
    shown = cli("show", run_id, app=CRASH_APP).stdout
    assert "waiting" in shown
    assert "uncertain" in shown
    # What the letter was sent, for the person who checks with the bank.
    told = cli("task", "show", task_id[:10], app=CRASH_APP).stdout
    assert f"{task_id}  Did bank.letters.post happen?" in told
    assert '  sent:     {"to": "a", "text": "paid 10 of 10000"}' in told
    assert f"remit task resolve {task_id} --done --output JSON" in told
    assert f"waits at task {task_id}" in shown
    assert f"remit task resolve {task_id} --done" in shown

    # Refusals exit 1, say what to change, and write nothing.
    for args, message in [
        ([], "--done (it happened"),
        (["--done", "--not-done"], "one of the two"),
        (["--done", "--output", '{"letter_id": 5}'], "`letter_id`: Input should be a valid string"),
        (["--done", "--output", "[1]"], "--output must be a JSON object"),
        (["--not-done", "--output", "{}"], "an output goes with done only"),
    ]:
        refused = cli("task", "resolve", task_id, *args, app=CRASH_APP, check=False)
        assert refused.returncode == 1, refused.stdout
        assert message in refused.stderr, refused.stderr
    missing = cli("task", "resolve", "tsk_missing", "--not-done", app=CRASH_APP, check=False)
    assert missing.returncode == 1
    assert "there is no task tsk_missing" in missing.stderr
    assert RunStore(cli.db).get(run_id).status == "waiting"
    assert "open" in cli("tasks", "--open", app=CRASH_APP).stdout

    # The bank's record says the letter went out: answer so, with what it returned.
    (letter,) = _letters(cli)
    output = json.dumps(letter["output"])
    done = cli(
        "task", "resolve", task_id, "--done", "--output", output, "--as", "user:bob", app=CRASH_APP
    )
    assert f"{task_id} done by user:bob" in done.stdout
    assert f"run {run_id} resumes on attempt {run_id}:2" in done.stdout
    assert "the run carries on as if the call had returned this output" in done.stdout
    cli.wait_for(run_id, "done")

    run = RunStore(cli.db).get(run_id)
    assert run.output is not None
    assert run.output["letter"] == letter["output"]["letter_id"]
    assert _letters(cli) == [letter]
    assert [r.status for r in LedgerStore(cli.db).list(run_id=run_id)] == ["ok"] * 4
    assert "no open tasks" in cli("tasks", "--open", app=CRASH_APP).stdout
    told = cli("task", "show", task_id, app=CRASH_APP).stdout
    assert "by user:bob" in told
    assert f"  output:   {output}" in told
    again = cli("task", "resolve", task_id, "--not-done", app=CRASH_APP, check=False)
    assert again.returncode == 1
    assert "already resolved done by user:bob" in again.stderr


def test_a_repeated_key_replays_the_first_answer(cli: Cli) -> None:
    run_id = _letter_cut_off(cli)
    task_id = _open_task(cli, run_id)
    (letter,) = _letters(cli)
    args = ["task", "resolve", task_id, "--done", "--output", json.dumps(letter["output"])]

    first = cli(*args, "--key", "answer-1", app=CRASH_APP)
    again = cli(*args, "--key", "answer-1", app=CRASH_APP)

    assert "replayed" not in first.stdout
    assert "replayed: this key had already resolved it" in again.stdout
    assert f"resumes on attempt {run_id}:2" in again.stdout
    cli.wait_for(run_id, "done")
    assert RunStore(cli.db).get(run_id).attempt == 2


def test_a_letter_that_was_not_posted_is_posted_again_once_with_its_key(cli: Cli) -> None:
    run_id = _letter_cut_off(cli, "sending-letter")
    task_id = _open_task(cli, run_id)
    assert _letters(cli) == []  # the bank's record: it never went out

    answered = cli("task", "resolve", task_id, "--not-done", app=CRASH_APP)
    assert f"{task_id} not_done by user:ann" in answered.stdout
    assert f"`bank.letters.post` is called again with the same key ({run_id}:5)" in (
        answered.stdout
    )
    cli.wait_for(run_id, "done")

    assert [e["idempotency_key"] for e in _letters(cli)] == [f"{run_id}:5"]
    run = RunStore(cli.db).get(run_id)
    assert run.output is not None
    assert run.output["letter"] == f"lt_{run_id}:5"
    rows = LedgerStore(cli.db).list(run_id=run_id)
    assert [r.status for r in rows] == ["ok"] * 4
    assert (rows[-1].op_id, rows[-1].attempt) == ("bank.letters.post", 2)
    assert "not_done" in cli("tasks", "--run", run_id, app=CRASH_APP).stdout


def test_reconcile_opens_the_task_of_a_cancelled_runs_cut_off_letter(cli: Cli) -> None:
    (cli.tmp / "hold-sending-letter").touch()
    first = cli.worker(CRASH_APP)
    run_id = cli(
        "start", "payout", "--input", '{"account": "a", "amount": 10}', app=CRASH_APP
    ).stdout.strip()
    deadline = time.monotonic() + 60
    while not (cli.tmp / "reached-sending-letter").exists():
        assert time.monotonic() < deadline, cli.log(0)
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert cli("cancel", run_id, app=CRASH_APP).stdout.strip() == f"{run_id} cancelled"
    assert "no tasks" in cli("tasks", app=CRASH_APP).stdout

    planned = cli("reconcile", "--dry-run", app=CRASH_APP).stdout
    assert "uncertain" in planned
    assert "no tasks" in cli("tasks", app=CRASH_APP).stdout
    reconciled = cli("reconcile", app=CRASH_APP).stdout
    assert "uncertain" in reconciled
    assert run_id in reconciled
    assert "asks a person whether it happened" in reconciled
    assert "nothing to do" in cli("reconcile", app=CRASH_APP).stdout

    listed = cli("tasks", "--open", app=CRASH_APP).stdout
    (line,) = [line for line in listed.splitlines() if line.strip().startswith("tsk_")]
    task_id = line.split()[0]
    assert f"{run_id}:5" in line
    answered = cli("task", "resolve", task_id, "--not-done", app=CRASH_APP)
    assert (
        f"run {run_id} is cancelled and waits on no attempt at this call: the answer is "
        "recorded in the ledger only"
    ) in answered.stdout
    row = LedgerStore(cli.db).get(f"{run_id}:5")
    assert row is not None
    assert row.status == "not_done"
    assert RunStore(cli.db).get(run_id).status == "cancelled"
    assert _letters(cli) == []
