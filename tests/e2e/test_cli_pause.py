"""`remit pause` and `remit resume` as an operator runs them, against a worker in its own
process: the running payout parks after the step it is in, a payout started meanwhile waits
in its queue, and the resume carries both on, every write made once."""

from __future__ import annotations

import json
import time

from remit.core.runs import RunStore
from tests.e2e.cli_support import CRASH_APP, Cli


def test_pause_parks_running_work_and_resume_carries_it_on(cli: Cli) -> None:
    cli.env["REMIT_SWEEP_INTERVAL"] = "0.1"  # how soon a worker sees the pause
    cli.env["REMIT_LOG_LEVEL"] = "INFO"  # to hear when it has
    # The payout is held between its steps until the worker has seen the pause.
    (cli.tmp / "slow-between").write_text("120")
    cli.worker(CRASH_APP)
    first = cli.start_payout_and_wait_between()

    paused = cli("pause", app=CRASH_APP).stdout
    assert "paused: 1 queue stopped; running runs park at their next step" in paused
    cli.wait_in_log(0, "the app is paused: each running run parks at its next step")
    (cli.tmp / "slow-between").unlink()
    cli.wait_for(first, "paused")
    runs = RunStore(cli.db)
    assert runs.get(first).attempt == 1
    second = cli(
        "start", "payout", "--input", '{"account": "b", "amount": 4}', app=CRASH_APP
    ).stdout.strip()
    time.sleep(1.0)
    assert runs.get(second).status == "queued"  # the queue dequeues nothing while paused
    assert "paused" in cli("runs", "--status", "paused", app=CRASH_APP).stdout
    # Nothing for the reconciler while the app is paused: the parked run stays parked.
    assert cli("reconcile", "--dry-run", app=CRASH_APP).stdout.strip() == "nothing to do (dry run)"

    resumed = cli("resume", app=CRASH_APP).stdout
    assert "resumed: 1 parked run carries on" in resumed
    assert first in resumed
    cli.wait_for(first, "done")
    cli.wait_for(second, "done")
    assert runs.get(first).attempt == 2
    assert "resumed: 0 parked runs carry on" in cli("resume", app=CRASH_APP).stdout

    journal = [json.loads(line) for line in (cli.tmp / "journal.jsonl").read_text().splitlines()]
    keys = [entry["idempotency_key"] for entry in journal]
    assert len(keys) == 6  # two transfers and a letter per payout
    assert len(set(keys)) == 6  # each once
