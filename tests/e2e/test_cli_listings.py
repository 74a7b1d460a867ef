"""What a script reads from the command line: every listing's `--json` (a JSON array of the
objects the HTTP API answers with, `remit show` one object), and `remit runs` filtered by
record, starter and start time, on the database and through `remit serve` alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from remit.connectors.apps import AppEntry
from remit.serve.models import (
    ActivityView,
    ApprovalView,
    BudgetPeriod,
    DeadlineView,
    DenialView,
    LedgerEntry,
    RunView,
    SecretView,
    StepView,
    TaskView,
    TokenView,
    WorkerView,
)
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

CHASE = {"invoice_id": "inv_1003", "customer_email": "finance@fabrikam.example"}
WRITE_OFF = {"invoice_id": "inv_1003", "reason": "customer in administration"}


def _listed(printed: str, view: type[BaseModel]) -> list[dict[str, Any]]:
    """`printed` read as a JSON array of objects, each with exactly the fields of `view`."""
    found = json.loads(printed)
    assert isinstance(found, list), printed
    fields = {field.alias or name for name, field in view.model_fields.items()}
    for each in found:
        assert set(each) == fields, (view.__name__, sorted(set(each) ^ fields))
    return found


def test_every_listing_prints_a_json_array_of_the_apis_objects(cli: Cli) -> None:
    cli.worker()
    chase = cli("start", "ar.chase-invoice", "--input", json.dumps(CHASE)).stdout.strip()
    write_off = cli("start", "ar.write-off", "--input", json.dumps(WRITE_OFF)).stdout.strip()
    approval = cli.pending_approvals(write_off)[0]
    cli.wait_for(chase, "done")
    cli("secrets", "set", "SHOP_TOKEN", "--as", "user:sam", stdin="s3cret\n")
    cli("tokens", "create", "--for", "user:carol", "--as", "user:sam")
    cli("approve", approval, "--as", "user:dave", check=False)  # refused: a denial

    runs = _listed(cli("runs", "--json").stdout, RunView)
    assert [run["run_id"] for run in runs] == [write_off, chase]
    assert runs[0]["status"] == "waiting"
    assert runs[1]["created_at"].endswith("Z")
    [pending] = _listed(cli("approvals", "--json").stdout, ApprovalView)
    assert (pending["id"], pending["run_id"], pending["status"]) == (approval, write_off, "pending")
    assert _listed(cli("tasks", "--json").stdout, TaskView) == []
    kinds = [
        row["kind"]
        for row in _listed(cli("activity", "invoice", "inv_1003", "--json").stdout, ActivityView)
    ]
    assert kinds[:2] == ["run.started", "run.done"]
    ledger = _listed(cli("ledger", "--run", chase, "--json").stdout, LedgerEntry)
    assert "mail.messages.send" in [row["op_id"] for row in ledger]
    assert any(row["cost_usd"] is not None for row in ledger)  # the model's call, in USD
    deadlines = _listed(cli("deadlines", "--json").stdout, DeadlineView)
    assert ("expiry", approval) in [(each["kind"], each["target"]) for each in deadlines]
    [worker] = _listed(cli("workers", "--json").stdout, WorkerView)
    assert worker["state"] == "live"
    [denial] = _listed(cli("denials", "--json").stdout, DenialView)
    assert (denial["principal"], denial["action"]) == ("user:dave", "decide")
    [budget] = _listed(cli("budgets", "--json").stdout, BudgetPeriod)
    assert budget["scope"] == "app"
    [secret] = _listed(cli("secrets", "list", "--json").stdout, SecretView)
    assert (secret["name"], secret["set_by"]) == ("SHOP_TOKEN", "user:sam")
    assert "s3cret" not in cli("secrets", "list", "--json").stdout
    [token] = _listed(cli("tokens", "list", "--json", "--as", "user:sam").stdout, TokenView)
    assert (token["principal"], token["state"]) == ("user:carol", "active")
    apps = _listed(cli("apps", "--json").stdout, AppEntry)
    assert [entry["name"] for entry in apps] == ["", "ar"]

    # Nothing to list is an empty array, not a sentence.
    assert json.loads(cli("tasks", "--open", "--json").stdout) == []
    # A listing prints its ids or its rows: asked for both, it is a mistake in the call.
    both = cli("runs", "--json", "--quiet", check=False)
    assert both.returncode == 2
    assert "give --quiet (only the ids) or --json (every field), not both" in both.stderr


def test_show_prints_one_json_object_with_the_runs_steps_and_ledger(cli: Cli) -> None:
    done = cli("run", "ar.chase-invoice", "--input", json.dumps(CHASE), "--timeout", "60")
    run_id = done.stderr.split()[1]
    shown = json.loads(cli("show", run_id[:12], "--json").stdout)
    assert set(shown) == set(RunView.model_fields) | {
        "parent", "waiting", "steps", "ledger", "state", "messages", "children",
    }  # fmt: skip
    assert (shown["parent"], shown["waiting"], shown["state"]) == (None, [], {})
    assert (shown["messages"], shown["children"]) == ([], [])
    assert (shown["run_id"], shown["status"]) == (run_id, "done")
    for step in shown["steps"]:
        assert set(step) == set(StepView.model_fields)
    assert "mail.messages.send" in [step["name"] for step in shown["steps"]]
    for row in shown["ledger"]:
        assert set(row) == set(LedgerEntry.model_fields)
    assert f"{run_id}:4" in [row["idempotency_key"] for row in shown["ledger"]]


def test_runs_are_listed_by_record_starter_and_start_time(cli: Cli) -> None:
    chase = cli("start", "ar.chase-invoice", "--input", json.dumps(CHASE)).stdout.strip()
    other = json.dumps({"invoice_id": "inv_1001"})
    by_carol = cli(
        "start", "ar.chase-invoice", "--input", other, "--as", "user:carol"
    ).stdout.strip()

    def listed(*filters: str) -> list[str]:
        return cli("runs", "--quiet", *filters).stdout.split()

    assert listed("--record", "invoice:inv_1003") == [chase]
    assert listed("--record", "invoice:inv_1001", "--started-by", "user:ann") == []
    assert listed("--started-by", "user:carol") == [by_carol]
    assert listed("--since", "2h") == [by_carol, chase]
    assert listed("--since", "2999-01-01") == []
    assert listed("--since", "2000-01-01T00:00+02:00", "--record", "invoice:inv_1001") == [by_carol]
    assert "no runs" in cli("runs", "--record", "invoice:inv_0000").stdout

    unread = cli("runs", "--since", "yesterday", check=False)
    assert unread.returncode == 1
    assert unread.stderr.strip() == (
        "error: --since 'yesterday' is not a time: give an ISO date or time (2026-12-01, "
        "2026-12-01T09:30, 2026-12-01T09:30+02:00; UTC unless it names a zone) or how long "
        "ago (30m, 2h, 3d, 1w)"
    )
    no_colon = cli("runs", "--record", "inv_1003", check=False)
    assert no_colon.returncode == 1
    assert no_colon.stderr.strip() == (
        "error: --record 'inv_1003' is not TYPE:ID: name the record as its type and id, "
        "e.g. invoice:inv_1003"
    )


def test_listings_and_filters_through_the_api_are_the_same(cli: Cli, tmp_path: Path) -> None:
    carol = cli("tokens", "create", "--for", "user:carol", "--as", "user:sam").stdout.strip()
    chase = cli("start", "ar.chase-invoice", "--input", json.dumps(CHASE)).stdout.strip()
    cli("start", "ar.chase-invoice", "--input", json.dumps({"invoice_id": "inv_1001"}))
    cli.spawn("serve", "--port", "0")
    nowhere = tmp_path / "operator"
    nowhere.mkdir()
    remote = Remote(_listening(cli, 0), nowhere)

    here = json.loads(cli("runs", "--record", "invoice:inv_1003", "--json").stdout)
    there = remote(
        "runs",
        "--record",
        "invoice:inv_1003",
        "--since",
        "1h",
        "--started-by",
        "user:ann",
        "--json",
        token=carol,
    ).stdout
    assert _listed(there, RunView) == here
    assert [run["run_id"] for run in here] == [chase]
    assert json.loads(remote("deadlines", "--json", token=carol).stdout) == json.loads(
        cli("deadlines", "--json").stdout
    )
    refused = remote("runs", "--since", "soon", token=carol, check=False)
    assert refused.returncode == 1
    assert "--since 'soon' is not a time" in refused.stderr
