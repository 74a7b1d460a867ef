"""`remit schedules`, `remit schedules pause NAME` and `resume NAME` as a user runs them: the
listing, the policies and the audit, on the database and through `remit serve`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.core.schema import audit
from remit.serve.schedule_routes import ScheduleView
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

SCHEDULED_APP = """
from datetime import datetime

from pydantic import BaseModel

from remit import App, Context, schedule, workflow


class Report(BaseModel):
    scheduled_at: datetime


@workflow(
    name="report",
    input=Report,
    trigger=schedule("0 9 * * MON-FRI", tz="Europe/Helsinki", backfill="latest"),
)
def report(ctx: Context, input: Report) -> str:
    return input.scheduled_at.isoformat()


@workflow(name="adhoc", input=Report)
def adhoc(ctx: Context, input: Report) -> str:
    return "by hand"


app = App(name="reports", workflows=[report, adhoc])
"""

POLICY = """
permit (principal == User::"carol", action == Action::"manage_schedules", resource);
permit (
    principal == User::"carol",
    action in [Action::"read_operations", Action::"manage_tokens"],
    resource
);
"""


@pytest.fixture
def scheduled_app(tmp_path: Path) -> Path:
    folder = tmp_path / "reports_app"
    (folder / "policies").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(textwrap.dedent(SCHEDULED_APP))
    (folder / "policies" / "reports.cedar").write_text(POLICY)
    return folder


def _row(listed: str) -> list[str]:
    [line] = [line for line in listed.splitlines() if line.split()[:1] == ["report"]]
    return line.split()


def test_a_schedule_is_listed_paused_and_resumed_by_whom_the_policies_allow(
    cli: Cli, scheduled_app: Path
) -> None:
    listed = cli("schedules", app=scheduled_app).stdout
    assert listed.splitlines()[0].split() == [
        "workflow", "cron", "tz", "backfill", "next", "last", "fired", "paused",
    ]  # fmt: skip
    row = _row(listed)
    assert row[:7] == ["report", "0", "9", "*", "*", "MON-FRI", "Europe/Helsinki"]
    assert row[7] == "latest"
    assert row[-1] == "-"  # not paused
    [shown] = json.loads(cli("schedules", "--json", app=scheduled_app).stdout)
    assert set(shown) == set(ScheduleView.model_fields)
    assert (shown["workflow"], shown["paused"], shown["last_fired_at"]) == ("report", False, None)
    assert shown["next_at"].endswith("T07:00:00Z")  # 09:00 in Helsinki, in winter

    refused = cli(
        "schedules", "pause", "report", "--as", "user:ann", app=scheduled_app, check=False
    )
    assert refused.returncode == 1
    assert 'user:ann may not manage_schedules Workflow::"report": no policy permits it' in (
        refused.stderr
    )
    paused = cli("schedules", "pause", "report", "--as", "user:carol", app=scheduled_app).stdout
    assert paused.startswith("schedule report paused ")
    assert paused.strip().endswith(
        "by user:carol: it fires nothing until `remit schedules resume report`"
    )
    again = cli("schedules", "pause", "report", "--as", "user:carol", app=scheduled_app).stdout
    assert again.startswith("schedule report was already paused (paused ")
    [shown] = json.loads(cli("schedules", "--json", app=scheduled_app).stdout)
    assert (shown["paused"], shown["paused_by"], shown["next_at"]) == (True, "user:carol", None)
    assert "schedule" not in cli("deadlines", app=scheduled_app).stdout  # it is due at no time
    row = _row(cli("schedules", app=scheduled_app).stdout)
    assert row[8] == "-"  # no next instant
    assert row[-5:] == ["paused", row[-4], row[-3], "by", "user:carol"]

    resumed = cli("schedules", "resume", "report", "--as", "user:carol", app=scheduled_app).stdout
    assert resumed.startswith(
        "schedule report resumed: the instants it missed are skipped but the latest, which "
        "fires once (backfill=latest); next instant "
    )
    assert (
        "was not paused"
        in cli("schedules", "resume", "report", "--as", "user:carol", app=scheduled_app).stdout
    )
    with cli.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit.c.action, audit.c.actor).where(audit.c.target == "schedule:report")
        ).all()
    assert [tuple(row) for row in rows] == [
        ("schedule.paused", "user:carol"),
        ("schedule.resumed", "user:carol"),
    ]

    unscheduled = cli("schedules", "pause", "adhoc", app=scheduled_app, check=False)
    assert unscheduled.returncode == 1
    assert unscheduled.stderr.strip() == (
        "error: `adhoc` has no schedule of app `reports` (its scheduled workflows: report): "
        "`remit schedules` lists them"
    )
    unknown = cli("schedules", "resume", "weekly", app=scheduled_app, check=False)
    assert unknown.returncode == 1
    assert "`weekly` is no workflow of app `reports`" in unknown.stderr


def test_schedules_through_the_api(cli: Cli, scheduled_app: Path, tmp_path: Path) -> None:
    carol = cli(
        "tokens", "create", "--for", "user:carol", "--as", "user:carol", app=scheduled_app
    ).stdout.strip()
    cli.spawn("serve", "--port", "0", app=scheduled_app)
    nowhere = tmp_path / "operator"
    nowhere.mkdir()
    remote = Remote(_listening(cli, 0), nowhere)

    paused = remote("schedules", "pause", "report", token=carol).stdout
    assert "by user:carol: it fires nothing until" in paused
    [there] = json.loads(remote("schedules", "--json", token=carol).stdout)
    assert there == json.loads(cli("schedules", "--json", app=scheduled_app).stdout)[0]
    assert (there["paused"], there["paused_by"]) == (True, "user:carol")
    assert "resumed" in remote("schedules", "resume", "report", token=carol).stdout
    missing = remote("schedules", "pause", "adhoc", token=carol, check=False)
    assert missing.returncode == 1
    assert "`adhoc` has no schedule of app `reports`" in missing.stderr
