"""`remit send`, `remit state`, `remit runs --parent` and what `remit show` says of a run's
waits, published state, messages, parent and children, as a user runs them: on the database and
through `remit serve` (`REMIT_URL`), under the app's policies, on `tests/waits_app.py`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from remit.serve.message_routes import ChildView, MessageView, SentView
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import Remote, _listening

APP = """
from tests.waits_app import make_waits_app

app = make_waits_app()
"""
# carol may do anything; ann (the command line's REMIT_AS here) starts and reads runs only.
POLICIES = """
permit (principal == User::"carol", action, resource);
permit (principal == User::"ann", action in [Action::"start", Action::"read_runs"], resource);
"""
PAID = '{"amount": "120.00", "reference": "pi_1"}'


@pytest.fixture
def ledger_app(tmp_path: Path) -> Path:
    folder = tmp_path / "ledger_app"
    (folder / "policies").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(textwrap.dedent(APP))
    (folder / "policies" / "ledger.cedar").write_text(POLICIES)
    return folder


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_a_message_sent_from_the_command_line_moves_a_waiting_run_on(
    cli: Cli, ledger_app: Path
) -> None:
    cli.worker(ledger_app)
    run_id = cli(
        "start", "await-payment", "--input", '{"timeout": 3600}', app=ledger_app
    ).stdout.strip()
    cli.wait_for(run_id, "waiting")
    shown = lines(cli("show", run_id, app=ledger_app).stdout)
    [waits] = [line for line in shown if "waits for" in line]
    assert waits.startswith("  waits for a message on paid (step 2), until ")
    assert not any(
        line.startswith(("  parent", "  state", "messages", "children")) for line in shown
    )

    # ann may not send; carol may.
    denied = cli("send", run_id, "paid", "--input", PAID, app=ledger_app, check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip().splitlines()[-1] == (
        'error: user:ann may not send Workflow::"await-payment": no policy permits it'
    )
    kept = cli("send", run_id, "other", "--input", '"x"', "--as", "user:carol", app=ledger_app)
    assert lines(kept.stdout) == [
        f"message 1 on other sent to {run_id}",
        "  the run is not waiting on other: it keeps the message until a wait for other takes it",
    ]
    sent = cli(
        "send", run_id[:12], "paid", "--input", PAID, "--key", "pay-1", "--as", "user:carol",
        app=ledger_app,
    )  # fmt: skip
    assert lines(sent.stdout) == [
        f"message 2 on paid sent to {run_id}",
        f"  the run was waiting on paid: it resumes on attempt {run_id}:2",
    ]
    again = cli(
        "send", run_id, "paid", "--input", PAID, "--key", "pay-1", "--as", "user:carol", "--json",
        app=ledger_app,
    )  # fmt: skip
    assert json.loads(again.stdout) == {
        "seq": 2,
        "run_id": run_id,
        "topic": "paid",
        "resumed_workflow_id": f"{run_id}:2",  # the first send's, made by it
        "replayed": True,
    }
    cli.wait_for(run_id, "done")

    shown = lines(cli("show", run_id, app=ledger_app).stdout)
    assert not any("waits for" in line for line in shown)
    heading = shown.index("messages")
    assert shown[heading + 1].split() == [
        "seq", "topic", "status", "sent", "by", "sent", "key", "payload",
    ]  # fmt: skip
    first, second = shown[heading + 2], shown[heading + 3]
    assert first.split()[:4] == ["1", "other", "queued", "user:carol"]
    assert first.split()[-2:] == ["-", '"x"']
    assert second.split()[:4] == ["2", "paid", "taken", "user:carol"]
    assert second.endswith('pay-1  {"amount": "120.00", "reference": "pi_1"}')
    [step] = [line for line in shown if "wait_for:paid" in line and line.split()[0] == "2"]
    assert 'message 2 from user:carol: {"amount": "120.00", "reference": "pi_1"}' in step

    as_json = json.loads(cli("show", run_id, "--json", app=ledger_app).stdout)
    assert (as_json["parent"], as_json["waiting"], as_json["state"], as_json["children"]) == (
        None,
        [],
        {},
        [],
    )
    assert [set(each) for each in as_json["messages"]] == [set(MessageView.model_fields)] * 2
    assert [(m["seq"], m["topic"], m["status"], m["key"]) for m in as_json["messages"]] == [
        (1, "other", "queued", None),
        (2, "paid", "taken", "pay-1"),
    ]

    finished = cli(
        "send", run_id, "paid", "--input", PAID, "--as", "user:carol", app=ledger_app, check=False
    )
    assert finished.returncode == 1
    assert finished.stderr.strip() == (
        f"error: run {run_id} is done: it waits for no more messages, and the message on "
        "`paid` was not kept"
    )
    reused = cli(
        "send", run_id, "other", "--input", "1", "--key", "pay-1", "--as", "user:carol",
        app=ledger_app, check=False,
    )  # fmt: skip
    assert reused.returncode == 1
    assert "message key 'pay-1' was first used to send message 2 on `paid`" in reused.stderr
    unknown = cli("send", "run_nothere", "paid", "--input", PAID, app=ledger_app, check=False)
    assert (unknown.returncode, unknown.stderr.strip()) == (
        1,
        "error: no run `run_nothere`: `remit runs` lists the runs",
    )
    bad = cli("send", run_id, "paid", "--input", "{nope", app=ledger_app, check=False)
    assert bad.returncode == 1
    assert "error: --input is not valid JSON" in bad.stderr
    spaced = cli("send", run_id, "paid day", "--input", "1", app=ledger_app, check=False)
    assert spaced.returncode == 1
    assert "topic 'paid day' must be 1 to 100 printable characters with no spaces" in (
        spaced.stderr
    )
    missing = cli("send", run_id, "paid", app=ledger_app, check=False)
    assert missing.returncode == 2
    assert "--input" in missing.stderr


def test_a_parent_its_children_and_what_it_published_on_the_command_line(
    cli: Cli, ledger_app: Path
) -> None:
    cli.worker(ledger_app)
    parent = cli(
        "start", "credit-note", "--input", '{"lines": 2, "hold": true}', app=ledger_app
    ).stdout.strip()
    cli.wait_for(parent, "waiting")
    children = json.loads(cli("show", parent, "--json", app=ledger_app).stdout)["children"]
    assert [set(each) for each in children] == [set(ChildView.model_fields)] * 2
    assert [(c["workflow"], c["key"], c["step_id"]) for c in children] == [
        ("refund-line", "line-0", 2),
        ("refund-line", "line-1", 3),
    ]
    ids = [c["run_id"] for c in children]
    for child in ids:
        cli.wait_for(child, "waiting")

    listed = cli("runs", "--parent", parent[:12], "--quiet", app=ledger_app).stdout.split()
    assert sorted(listed) == sorted(ids)
    table = lines(cli("runs", "--parent", parent, app=ledger_app).stdout)
    assert table[0].split()[:3] == ["run", "workflow", "status"]
    assert sorted(row.split()[:3] for row in table[1:]) == sorted(
        [child, "refund-line", "waiting"] for child in ids
    )
    as_json = json.loads(cli("runs", "--parent", parent, "--json", app=ledger_app).stdout)
    assert sorted(each["run_id"] for each in as_json) == sorted(ids)
    nobody = cli("runs", "--parent", "run_nothere", app=ledger_app, check=False)
    assert (nobody.returncode, nobody.stderr.strip()) == (
        1,
        "error: no run `run_nothere`: `remit runs` lists the runs",
    )

    shown = lines(cli("show", parent, app=ledger_app).stdout)
    assert f"  waits for its child runs {ids[0]}, {ids[1]} (step 5)" in shown
    assert '  state  progress = {"started": 2}' in shown
    heading = shown.index("children")
    assert shown[heading + 1].split() == ["run", "workflow", "key", "status", "step", "created"]
    assert [row.split()[:5] for row in shown[heading + 2 : heading + 4]] == [
        [ids[0], "refund-line", "line-0", "waiting", "2"],
        [ids[1], "refund-line", "line-1", "waiting", "3"],
    ]
    child = lines(cli("show", ids[0][:12], app=ledger_app).stdout)
    assert f"  parent {parent} (its step 2, key line-0)" in child
    assert "  waits for a message on go (step 1)" in child

    assert lines(cli("state", parent, app=ledger_app).stdout) == ['progress = {"started": 2}']
    assert json.loads(cli("state", parent, "--json", app=ledger_app).stdout) == {
        "progress": {"started": 2}
    }
    assert lines(cli("state", ids[0], app=ledger_app).stdout) == [f"{ids[0]} has published nothing"]

    for each in ids:
        cli("send", each, "go", "--input", "null", "--as", "user:carol", app=ledger_app)
    cli.wait_for(parent, "done")
    shown = lines(cli("show", parent, app=ledger_app).stdout)
    assert not any("waits for" in line for line in shown)
    [ended] = [line for line in shown if "wait:children" in line and line.split()[0] == "2"]
    assert "2 children ended: 2 done" in ended
    [published] = [line for line in shown if line.startswith("  state  progress = ")]
    assert json.loads(published.removeprefix("  state  progress = ")) == {"started": 2, "done": 2}


def test_messages_and_children_through_the_api(cli: Cli, ledger_app: Path, tmp_path: Path) -> None:
    carol, ann = (
        cli("tokens", "create", "--for", who, "--as", "user:carol", app=ledger_app).stdout.strip()
        for who in ("user:carol", "user:ann")
    )
    cli.worker(ledger_app)
    cli.spawn("serve", "--port", "0", app=ledger_app)
    nowhere = tmp_path / "operator"
    nowhere.mkdir()
    remote = Remote(_listening(cli, 1), nowhere)

    parent = remote(
        "start", "credit-note", "--input", '{"lines": 2, "hold": true}', token=carol
    ).stdout.strip()
    cli.wait_for(parent, "waiting")
    ids = remote("runs", "--parent", parent, "--quiet", token=carol).stdout.split()
    assert len(ids) == 2
    for child in ids:
        cli.wait_for(child, "waiting")

    there = json.loads(remote("show", parent, "--json", token=carol).stdout)
    here = json.loads(cli("show", parent, "--json", app=ledger_app).stdout)
    for field in ("parent", "waiting", "state", "messages", "children"):
        assert there[field] == here[field], field
    assert there["state"] == {"progress": {"started": 2}}
    assert (
        remote("state", parent, "--json", token=carol).stdout
        == cli("state", parent, "--json", app=ledger_app).stdout
    )
    [first] = [c["run_id"] for c in here["children"] if c["key"] == "line-0"]
    shown = lines(remote("show", first, token=carol).stdout)
    assert f"  parent {parent} (its step 2, key line-0)" in shown
    assert "  waits for a message on go (step 1)" in shown

    denied = remote("send", first, "go", "--input", "null", token=ann, check=False)
    assert denied.returncode == 1
    assert 'user:ann may not send Workflow::"refund-line"' in denied.stderr
    posing = remote(
        "send", first, "go", "--input", "null", "--as", "user:carol", token=ann, check=False
    )
    assert posing.returncode == 1
    assert "acts as the principal of its API token" in posing.stderr

    sent = remote("send", first[:12], "go", "--input", '{"ok": true}', "--key", "go-1", token=carol)
    assert lines(sent.stdout) == [
        f"message 1 on go sent to {first}",
        f"  the run was waiting on go: it resumes on attempt {first}:2",
    ]
    again = json.loads(
        remote(
            "send", first, "go", "--input", '{"ok": true}', "--key", "go-1", "--json", token=carol
        ).stdout
    )
    assert set(again) == set(SentView.model_fields)
    assert (again["seq"], again["replayed"]) == (1, True)
    cli.wait_for(first, "done")
    finished = remote("send", first, "go", "--input", "null", token=carol, check=False)
    assert finished.returncode == 1
    assert f"run {first} is done: it waits for no more messages" in finished.stderr
    unknown = remote("send", "run_nothere", "go", "--input", "null", token=carol, check=False)
    assert unknown.returncode == 1
    assert "no run `run_nothere`" in unknown.stderr
    [messaged] = json.loads(remote("show", first, "--json", token=carol).stdout)["messages"]
    assert (messaged["topic"], messaged["status"], messaged["sent_by"]) == (
        "go",
        "taken",
        "user:carol",
    )
