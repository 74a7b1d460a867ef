"""Approvals from the command line, as a user decides them: the write-off of the example app
waits at its gate while a worker serves, and `remit approve`/`reject` carry it on."""

from __future__ import annotations

import json
from pathlib import Path

from remit.core.runs import RunStore
from remit.people.approvals import Approvals
from tests.e2e.cli_support import Cli

CONSOLE_APP = Path(__file__).parent.parent / "apps" / "console_app"


def _audit(cli: Cli, approval_id: str) -> list[dict[str, object]]:
    return Approvals(cli.db, None, {}).audit(approval_id)  # type: ignore[arg-type]


def test_approve_with_an_edit_resumes_the_run_past_its_gate(cli: Cli) -> None:
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    cli.wait_for(run_id, "waiting")

    quiet = cli("approvals", "--pending", "--run", run_id, "--quiet").stdout
    assert quiet.split() == [approval]
    listed = cli("approvals", "--pending").stdout
    assert approval in listed
    assert "Write off 612.50 EUR" in listed
    assert "pending" in listed

    done = cli("approve", approval, "--edit", '{"amount": 50000}', "--reason", "settled")
    assert f"{approval} approved by user:ann" in done.stdout
    assert '"amount": 50000' in done.stdout
    assert f"resumes on attempt {run_id}:2" in done.stdout
    cli.wait_for(run_id, "done")
    run = RunStore(cli.db).get(run_id)
    assert run.output is not None
    assert run.output["amount"] == 50000
    assert run.output["credit_note_id"] == "cn_0001"

    shown = cli("show", run_id).stdout
    assert f"{approval} approved by user:ann via cli (edited)" in shown
    assert "copied" in shown  # the read before the gate was not run again
    (row,) = _audit(cli, approval)
    assert (row["actor"], row["action"]) == ("user:ann", "approval.approved")

    again = cli("approve", approval, check=False)
    assert again.returncode == 1
    assert f"{approval} is already approved by user:ann" in again.stderr
    assert cli("approvals", "--pending").stdout.strip() == "no pending approvals"


def test_reject_and_a_repeated_key_replays(cli: Cli) -> None:
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    first = cli("reject", approval, "--reason", "still collectable", "--key", "desk-42")
    assert f"{approval} rejected by user:ann" in first.stdout
    replay = cli("reject", approval, "--reason", "still collectable", "--key", "desk-42")
    assert "replayed" in replay.stdout
    # The key names that one request: another decision under it is refused, naming the first.
    other = cli("approve", approval, "--key", "desk-42", "--edit", '{"amount": 100}', check=False)
    assert other.returncode == 1
    assert f"decision key 'desk-42' was first used to reject {approval} as user:ann" in (
        other.stderr
    )
    cli.wait_for(run_id, "done")
    run = RunStore(cli.db).get(run_id)
    assert run.output is not None
    assert run.output["outcome"] == "not written off (rejected)"
    assert len(_audit(cli, approval)) == 1


def test_bad_decisions_exit_1_saying_what_to_change_and_decide_nothing(cli: Cli) -> None:
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    cases = [
        (["approve", "apr_missing"], "apr_missing is not an approval"),
        (["approve", approval, "--edit", "{amount"], "--edit is not valid JSON"),
        (["approve", approval, "--edit", "[1]"], "--edit must be a JSON object of fields"),
        (
            ["approve", approval, "--edit", '{"amount": -5}'],
            "does not parse as WriteOffDraft: amount: Input should be greater than 0",
        ),
    ]
    for args, message in cases:
        done = cli(*args, check=False)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert message in " ".join(done.stderr.split()), (args, done.stderr)
    assert cli("approvals", "--pending", "--quiet").stdout.split() == [approval]
    assert _audit(cli, approval) == []
    assert RunStore(cli.db).get(run_id).status == "waiting"


def test_deadlines_lists_a_pending_gates_expiry(cli: Cli) -> None:
    assert cli("deadlines").stdout.strip() == "no deadlines"
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    listed = cli("deadlines").stdout
    assert "expiry" in listed
    assert approval in listed
    assert "6d" in listed  # the write-off expires in 7 days


def test_ids_are_taken_by_a_prefix_and_listed_whole(cli: Cli) -> None:
    cli.worker()
    first = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    second = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(first)[0]
    cli.pending_approvals(second)
    listed = cli("approvals").stdout  # nine columns: the title wraps, the ids stay whole
    assert approval in listed
    assert first in cli("runs").stdout

    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
    ambiguous = cli("show", first[:shared], check=False)
    assert ambiguous.returncode == 1
    assert f"run `{first[:shared]}` is ambiguous" in " ".join(ambiguous.stderr.split())
    assert first in ambiguous.stderr
    assert second in ambiguous.stderr

    assert cli("show", first[: shared + 1]).stdout.startswith(first)
    done = cli("approve", approval[:12], "--as", "user:carol")
    assert f"{approval} approved by user:carol" in done.stdout
    cli.wait_for(first, "done")
    assert "no run `run_nope`" in cli("show", "run_nope", check=False).stderr


def test_a_batch_decides_every_approval_or_none_listing_every_refusal(cli: Cli) -> None:
    cli.worker()
    runs = [
        cli("start", "ar.write-off", "--input", json.dumps({"invoice_id": invoice})).stdout.strip()
        for invoice in ("inv_1003", "inv_1001", "inv_1003")
    ]
    first, second, third = (cli.pending_approvals(run_id)[0] for run_id in runs)
    cli("reject", first, "--as", "user:carol")

    refused = cli("approve", first, second, "--as", "user:carol", check=False)
    assert refused.returncode == 1
    assert f"{first} is already rejected by user:carol" in refused.stderr
    assert set(cli("approvals", "--pending", "--quiet").stdout.split()) == {second, third}

    both = cli("reject", second, third[:10], "--reason", "collected", "--as", "user:carol")
    assert f"{second} rejected by user:carol" in both.stdout
    assert f"{third} rejected by user:carol" in both.stdout
    for run_id in runs[1:]:
        cli.wait_for(run_id, "done")
    edit_two = cli("approve", first, second, "--edit", '{"amount": 1}', check=False)
    assert edit_two.returncode == 1
    assert "--edit changes one draft, and 2 approvals were named" in edit_two.stderr


def test_an_edit_to_a_field_the_type_keeps_exits_1_and_decides_nothing(cli: Cli) -> None:
    # The console app's refund lets an approver change the amount alone.
    cli.worker(CONSOLE_APP)
    given = {"subscription_id": "sub_7", "amount": "299.00", "reason": "double charge"}
    run_id = cli("start", "refund", "--input", json.dumps(given), app=CONSOLE_APP).stdout.strip()
    approval = cli.pending_approvals(run_id)[0]

    edit = '{"subscription_id": "sub_8", "amount": "250.00"}'
    refused = cli("approve", approval, "--edit", edit, app=CONSOLE_APP, check=False)
    assert refused.returncode == 1
    assert (
        f"{approval} has an edit changing subscription_id, which approval type `refund` keeps "
        "as the run proposed it: a decider may change only amount"
    ) in " ".join(refused.stderr.split())
    assert cli("approvals", "--pending", "--quiet", app=CONSOLE_APP).stdout.split() == [approval]
    assert _audit(cli, approval) == []

    done = cli("approve", approval, "--edit", '{"amount": "250.00"}', app=CONSOLE_APP)
    assert f"{approval} approved by user:ann" in done.stdout
    assert '"amount": "250.00"' in done.stdout
    cli.wait_for(run_id, "done")
    assert RunStore(cli.db).get(run_id).output == {"refunded": "250.00", "outcome": "refunded"}
