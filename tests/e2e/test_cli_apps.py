"""Apps from the command line: `remit apps` lists a repo's apps, and two repos share one
database, each worker serving its own queues, so pausing one leaves the other running."""

from __future__ import annotations

import time

from remit.core.runs import RunStore
from tests.e2e.cli_support import ROOT, Cli

OPS = ROOT / "tests" / "apps" / "ops_repo"
OTHER = ROOT / "tests" / "apps" / "other_repo"


def test_remit_apps_lists_each_app_with_its_workflows(cli: Cli) -> None:
    shown = cli("apps", app=OPS).stdout
    rows = {
        cells[0]: cells[1:]
        for line in shown.splitlines()
        if len(cells := [c.strip() for c in line.strip()[1:-1].split("│")]) == 3
    }
    assert rows["ar"] == ["ar.chase", "ar.notes"]
    assert rows["payroll"] == ["payroll.chase", "payroll.notes"]
    assert "hello" in rows["(root)"][0].split(), shown
    listed = cli("apps", "--json", app=OPS).stdout
    assert '"name": "payroll"' in listed


def test_two_repos_on_one_database_pause_apart(cli: Cli) -> None:
    cli.env["REMIT_SWEEP_INTERVAL"] = "0.1"
    cli.env["REMIT_ACTOR"] = "user:sam"
    cli.worker(OPS)
    cli.worker(OTHER)
    runs = RunStore(cli.db)
    first_ops = cli("start", "ar.chase", "--input", '{"who": "kim"}', app=OPS).stdout.strip()
    first_other = cli("start", "chase", "--input", '{"who": "kim"}', app=OTHER).stdout.strip()
    cli.wait_for(first_ops, "done")
    cli.wait_for(first_other, "done")
    assert runs.get(first_other).output == "other-repo chased kim"

    assert "paused" in cli("pause", app=OPS).stdout
    held = cli("start", "ar.chase", "--input", '{"who": "lee"}', app=OPS).stdout.strip()
    served = cli("start", "chase", "--input", '{"who": "lee"}', app=OTHER).stdout.strip()
    cli.wait_for(served, "done")  # the other repo's worker goes on
    time.sleep(1.0)
    assert runs.get(held).status == "queued"  # the paused repo's queue dequeues nothing

    cli("resume", app=OPS)
    cli.wait_for(held, "done")
    assert runs.get(held).output["times"] == 1
