"""`remit change open`, `remit changes`, `remit change show` and `remit deploys`, as a user runs
them: on the database and through `remit serve` (`REMIT_URL`), the same output either way. On
a copy of `tests/apps/change_app` whose repo is on a fake forge; its change runs are served by
a harness in the test's process, on the same database (both databases)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from remit.serve.change_routes import ChangeView, DeployView
from remit.serve.models import ActivityView
from remit.testing import Harness
from tests.change_support import Shop, shop_at, wait_for_status
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

# A change's checks are processes of their own: under load they take minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ANN, CAROL = "user:ann", "user:carol"
# What a change run reads, set by `shop_at` in this process's environment.
CHANGE_ENV = ("REMIT_FAKES_DIR", "REMIT_CHANGES_DIR", "REMIT_REPO_URL", "FORGE_WEBHOOK_SECRET")


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    return shop_at(tmp_path, monkeypatch)


@pytest.fixture
def harness(shop: Shop, database_url: str) -> Iterator[Harness]:
    with Harness(shop.app, database_url=database_url, actor=ANN) as running:
        yield running


@pytest.fixture
def remit(shop: Shop, harness: Harness, cli: Cli) -> Cli:
    """`remit` on the shop's database as ann, with the environment its change runs read."""
    cli.env.update({name: os.environ[name] for name in CHANGE_ENV})
    cli.env["REMIT_AS"] = ANN
    return cli


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def approve(harness: Harness, run_id: str) -> None:
    """carol approves the change's review, and the run merges and deploys."""
    [gate] = harness.approvals.list(run_id=run_id, status="pending")
    harness.decide(gate.id, "approved", by=CAROL)
    run = harness.wait(run_id, timeout=600, until=("done", "failed"))
    assert run.status == "done", run.error


def test_a_change_is_opened_followed_and_its_deploy_listed_from_the_command_line(
    shop: Shop, harness: Harness, remit: Cli
) -> None:
    app = shop.folder
    head = shop.forge.push(shop.repo, "notes", {"NOTES.md": "what changed\n"}, "Notes", "ann")
    assert remit("changes", app=app).stdout.strip() == "no changes"

    opened = lines(remit("change", "open", "notes", "--title", "Add notes", app=app).stdout)
    change_id = opened[0].split()[1]
    assert opened[0] == f"change {change_id} of notes into main: opened"
    run_id = opened[1].split()[1].rstrip(";")
    assert opened[1] == f"  run {run_id}; `remit change show {change_id}` follows it"
    wait_for_status(harness, change_id, "review")

    table = lines(remit("changes", app=app).stdout)
    assert table[0].split() == ["change", "branch", "status", "head", "author", "number", "updated"]
    assert table[1].split()[:6] == [change_id, "notes", "review", head[:12], ANN, "#1"]
    assert len(table) == 2
    assert remit("changes", "--branch", "other", app=app).stdout.strip() == "no changes of other"
    listed = json.loads(remit("changes", "--json", app=app).stdout)
    assert [set(each) for each in listed] == [set(ChangeView.model_fields)]
    assert (listed[0]["id"], listed[0]["status"], listed[0]["head"]) == (change_id, "review", head)

    shown = lines(remit("change", "show", change_id, app=app).stdout)
    assert shown[:10] == [
        f"change {change_id}  notes into main  review",
        "  title     Add notes",
        f"  author    {ANN}",
        f"  run       {run_id} (waiting)",
        "  request   #1 https://git.shop.test/shop/ops/pull/1",
        f"  head      {head}",
        "  merged    -",
        "  deployed  -",
        shown[8],
        shown[9],
    ]
    checks = shown.index(f"checks of {head[:12]}")
    assert [
        line for line in shown[checks:] if line.startswith("  ") and not line.startswith("    ")
    ] == [
        "  test  ok",
        "  plan  ok",
        "  deploy-check  ok",
    ]
    # Under each check, what it said: pytest's last line for the shop's own tests.
    assert any(re.match(r"    \d+ passed", line) for line in shown[checks:])
    assert any("Plan: 1 to create" in line for line in shown[checks:])
    activity = shown[shown.index("activity") :]
    assert activity[1].split() == ["#", "time", "kind", "actor", "what"]
    assert [line.split()[3] for line in activity[2:]][:3] == [
        "run.started",
        "change.opened",
        "change.checked",
    ]
    as_json = json.loads(remit("change", "show", change_id, "--json", app=app).stdout)
    assert set(as_json) == {*ChangeView.model_fields, "activity"}
    assert [set(row) for row in as_json["activity"]][:1] == [set(ActivityView.model_fields)]
    assert as_json["checks"]["results"]["test"]["ok"] is True

    missing = remit("change", "show", "chg_000000000000", app=app, check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: no change chg_000000000000: `remit changes` lists them"
    )
    assert remit("deploys", app=app).stdout.strip() == "no deploys"

    approve(harness, run_id)
    merged = shop.forge.head(shop.repo, "main")
    assert merged is not None
    deploys = lines(remit("deploys", app=app).stdout)
    assert deploys[0].split() == [
        "host", "revision", "kind", "health", "change", "run", "at", "detail",
    ]  # fmt: skip
    assert deploys[1].split()[:6] == ["web", merged[:12], "deploy", "healthy", change_id, run_id]
    assert len(deploys) == 2
    as_json = json.loads(remit("deploys", "--host", "web", "--json", app=app).stdout)
    assert [set(each) for each in as_json] == [set(DeployView.model_fields)]
    assert (as_json[0]["revision"], as_json[0]["healthy"]) == (merged, True)
    assert remit("deploys", "--host", "db", app=app).stdout.strip() == "no deploys of db"
    shown = lines(remit("change", "show", change_id, app=app).stdout)
    assert shown[0] == f"change {change_id}  notes into main  deployed"
    assert f"  merged    {merged}" in shown
    assert f"  deployed  {merged}" in shown


def test_the_change_commands_print_the_same_through_remit_serve(
    shop: Shop, harness: Harness, remit: Cli, tmp_path: Path
) -> None:
    app = shop.folder
    _, ann = harness.client.services.tokens.create(ANN, by=CAROL)
    _, dave = harness.client.services.tokens.create("user:dave", by=CAROL)
    remit.spawn("serve", "--port", "0", app=app)
    away = tmp_path / "operator"
    away.mkdir()
    server = Remote(_listening(remit, 0), away)
    shop.forge.push(shop.repo, "remote", {"NOTES.md": "from afar\n"}, "Afar", "ann")

    opened = lines(server("change", "open", "remote", token=ann).stdout)
    change_id = opened[0].split()[1]
    assert opened[0] == f"change {change_id} of remote into main: opened"
    change = wait_for_status(harness, change_id, "review")
    assert change.author == ANN  # the token's principal

    for command in (
        ["changes"],
        ["changes", "--json"],
        ["change", "show", change_id],
        ["change", "show", change_id, "--json"],
        ["deploys"],
    ):
        here = remit(*command, app=app).stdout
        there = server(*command, token=ann).stdout
        assert there == here, command
    # Who acts is the token's principal; dave, whom no policy names, reads no changes.
    as_other = server("change", "open", "x", "--as", CAROL, token=ann, check=False)
    assert as_other.returncode == 1
    assert "--as user:carol cannot be sent there" in as_other.stderr
    missing = server("change", "show", "chg_000000000000", token=ann, check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: no change `chg_000000000000`: GET /changes lists the changes"
    )
    assert server("changes", token=dave).stdout.strip() == "no changes"
    refused = server("change", "show", change_id, token=dave, check=False)
    assert refused.returncode == 1
    assert "user:dave may not read_runs" in refused.stderr

    approve(harness, change.run_id)
    assert (
        server("deploys", "--json", token=ann).stdout == remit("deploys", "--json", app=app).stdout
    )
