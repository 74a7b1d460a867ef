"""Policies from the command line, on the example desk: direct calls allowed, refused and held,
the refusals listed, remit's own principals refused, and a broken policy file reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import sqlalchemy as sa

from remit.core.schema import audit, denials, ledger, runs
from tests.e2e.cli_support import ACME, Cli


def test_a_clerk_reads_directly_and_a_stranger_is_refused(cli: Cli) -> None:
    done = cli("call", "payments.invoices.get", "--input", '{"invoice_id": "inv_1001"}')
    assert json.loads(done.stdout)["amount_due"] == 128_000
    assert "payments.invoices.get ok (key call_" in done.stderr

    refused = cli(
        "call",
        "payments.invoices.get",
        "--input",
        '{"invoice_id": "inv_1001"}',
        "--as",
        "user:dave",
        check=False,
    )
    assert refused.returncode == 1
    assert (
        'user:dave may not call Op::"payments.invoices.get": no policy permits it' in refused.stderr
    )
    listed = cli("denials").stdout
    assert "user:dave" in listed
    assert "payments.invoices.get" in listed
    with cli.db.engine.connect() as conn:
        actors = conn.execute(sa.select(ledger.c.actor)).scalars().all()
    assert actors == ["user:ann"]


def test_a_held_call_becomes_a_run_that_waits(cli: Cli) -> None:
    held = cli(
        "call",
        "payments.credit_notes.create",
        "--input",
        '{"invoice_id": "inv_1003", "amount": 500, "memo": "goodwill"}',
    )
    assert "held for approval (a credit note issued by hand waits for a controller)" in held.stdout
    with cli.db.engine.connect() as conn:
        row = conn.execute(sa.select(runs.c.workflow, runs.c.started_by)).one()
    assert tuple(row) == ("call", "user:ann")


def test_bad_input_and_remits_own_principals_are_refused(cli: Cli) -> None:
    for args, message in [
        (["call", "payments.invoices.get", "--input", "{}"], "invoice_id: Field required"),
        (["call", "payments.nope", "--input", "{}"], "has no op `payments.nope`"),
        (["start", "ar.chase-invoice", "--as", "remit:expiry"], "principals are remit's own"),
        (["start", "ar.chase-invoice", "--input", '{"invoice_id": "i"}', "--as", "ann"], "ann"),
    ]:
        done = cli(*args, check=False)
        assert done.returncode == 1, args
        assert message in done.stderr, (args, done.stderr)
    with cli.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar() == 0


def test_policies_are_shown_explained_and_a_broken_file_reported(cli: Cli, tmp_path: Path) -> None:
    shown = cli("policies").stdout
    assert "policies/acme.cedar" in shown
    assert "parse and validate" in shown
    allowed = cli("policies", "explain", "start", "ar.chase-invoice")
    assert "allowed: permitted by policies/acme.cedar:6" in allowed.stdout
    denied = cli(
        "policies", "explain", "start", "ar.chase-invoice", "--as", "user:dave", check=False
    )
    assert (denied.returncode, denied.stderr.strip()) == (1, "denied: no policy permits it")
    schema = json.loads(cli("policies", "schema").stdout)
    assert set(schema[""]["actions"]) == {
        "start",
        "call",
        "decide",
        "withdraw",
        "retry",
        "resolve",
        "cancel",
        "pause",
        "resume",
        "reconcile",
        "manage_tokens",
        "manage_schedules",
        "send",
        "set_secret",
        "delete_secret",
        "set_budget",
        "read_runs",
        "read_approvals",
        "read_operations",
        "read_chats",
    }

    broken = tmp_path / "acme"
    shutil.copytree(ACME, broken, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    (broken / "policies" / "zz.cedar").write_text(
        'permit (principal, action, resource);\n\npermit (principal, action == Action::"fly"'
        ", resource);\n"
    )
    shown = cli("policies", app=broken, check=False)
    assert shown.returncode == 1
    assert "broken, so every action is refused: policies/zz.cedar:3:" in shown.stderr
    start = cli(
        "start", "ar.chase-invoice", "--input", '{"invoice_id": "i"}', app=broken, check=False
    )
    assert start.returncode == 1
    assert "the policies are broken and refuse everything: policies/zz.cedar:3" in start.stderr


def test_explain_takes_a_resource_bare_or_as_cedar_writes_it(cli: Cli) -> None:
    context = ("--context", '{"decision": "rejected"}', "--as", "user:ann")
    bare = cli("policies", "explain", "decide", "write-off", *context)
    entity = cli("policies", "explain", "decide", 'ApprovalType::"write-off"', *context)
    assert bare.stdout == entity.stdout
    assert entity.stdout.startswith("allowed: permitted by policies/acme.cedar:")

    other = cli("policies", "explain", "decide", 'Workflow::"write-off"', *context, check=False)
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr.strip() == (
        "error: `decide` acts on ApprovalType entities, not on a Workflow: give "
        'ApprovalType::"write-off", or the bare name write-off'
    )
    unread = cli("policies", "explain", "start", 'Workflow::"ar\\q"', check=False)
    assert unread.returncode == 1
    assert 'is not a Cedar entity: write it as Workflow::"<name>", or give the bare name' in (
        unread.stderr
    )


def test_collection_records_from_the_command_line(cli: Cli) -> None:
    contact = '{"email": "ap@northwind.example", "reminders": 2, "note": "pays late"}'
    put = cli("data", "ar.contacts", "put", "--input", contact)
    assert json.loads(put.stdout)["reminders"] == 2
    got = json.loads(cli("data", "ar.contacts", "get", "ap@northwind.example").stdout)
    assert got["record"] == {
        "email": "ap@northwind.example",
        "reminders": 2,
        "last_chased": None,
        "note": "pays late",
    }
    cli("data", "ar.contacts", "put", "--input", '{"email": "finance@fabrikam.example"}')
    page = json.loads(cli("data", "ar.contacts", "list", "--limit", "1").stdout)
    assert ([r["email"] for r in page["records"]], page["next"]) == (
        ["ap@northwind.example"],
        "ap@northwind.example",
    )
    bad = cli(
        "data",
        "ar.contacts",
        "put",
        "--input",
        '{"email": "x@y", "reminders": "many"}',
        check=False,
    )
    assert bad.returncode == 1
    assert "input to `data.ar.contacts.put` does not parse: reminders:" in bad.stderr
    refused = cli(
        "data", "ar.contacts", "delete", "ap@northwind.example", "--as", "user:dave", check=False
    )
    assert 'user:dave may not call Op::"data.ar.contacts.delete"' in refused.stderr
    deleted = cli("data", "ar.contacts", "delete", "ap@northwind.example")
    assert json.loads(deleted.stdout) == {"deleted": True}
    gone = json.loads(cli("data", "ar.contacts", "get", "ap@northwind.example").stdout)
    assert gone == {"record": None}
    with cli.db.engine.connect() as conn:
        ops = conn.execute(sa.select(ledger.c.op_id).order_by(ledger.c.id)).scalars().all()
    assert ops == [
        "data.ar.contacts.put",
        "data.ar.contacts.get",
        "data.ar.contacts.put",
        "data.ar.contacts.list",
        "data.ar.contacts.delete",
        "data.ar.contacts.get",
    ]
    unknown = cli("data", "customers", "list", check=False)
    assert "has no collection `customers` (it has: ar.contacts)" in unknown.stderr


def test_a_stranger_is_refused_every_act_and_each_refusal_is_recorded(cli: Cli) -> None:
    run_id = cli(
        "start", "ar.chase-invoice", "--input", '{"invoice_id": "inv_1001"}'
    ).stdout.strip()
    acts = [
        (
            ["start", "ar.write-off", "--input", '{"invoice_id": "inv_1003", "reason": "x"}'],
            "start",
        ),
        (["cancel", run_id], "cancel"),
        (["pause"], "pause"),
        (["resume"], "resume"),
        (["reconcile"], "reconcile"),
        (["budgets", "set-limit", "--limit", "1000000"], "set_budget"),
        (["secrets", "delete", "MAIL_FROM"], "delete_secret"),
    ]
    for args, action in acts:
        refused = cli(*args, "--as", "user:dave", check=False)
        assert refused.returncode == 1, (args, refused.stdout)
        assert f"user:dave may not {action} " in refused.stderr, (args, refused.stderr)
    forged = cli("secrets", "set", "MAIL_FROM", "--as", "user:dave", check=False, stdin="x@y.z")
    assert forged.returncode == 1
    assert "user:dave may not set_secret " in forged.stderr
    with cli.db.engine.connect() as conn:
        refused_actions = conn.execute(
            sa.select(denials.c.action).where(denials.c.principal == "user:dave")
        ).scalars()
        assert sorted(refused_actions) == sorted([a for _, a in acts] + ["set_secret"])
        assert conn.execute(sa.select(runs.c.status)).scalars().all() == ["queued"]
        acts = conn.execute(sa.select(audit.c.action, audit.c.actor)).all()
        assert acts == [("run.started", "user:ann")]  # ann's run, and nothing dave did
    assert "$5.00" in cli("budgets").stdout


def test_a_principal_with_control_characters_is_refused_and_shown_escaped(cli: Cli) -> None:
    forged = "user:x\x1b[2J\nFAKE LINE"
    refused = cli("start", "ar.chase-invoice", "--as", forged, check=False)
    assert refused.returncode == 1
    assert "user:x\\x1b[2J\\nFAKE LINE" in refused.stderr
    assert "\x1b[2J" not in refused.stderr + refused.stdout
    with cli.db.engine.connect() as conn:
        assert conn.execute(sa.select(runs)).all() == []
        assert conn.execute(sa.select(denials)).all() == []


def test_a_write_to_a_fake_in_the_command_says_no_worker_will_see_it(cli: Cli) -> None:
    sent = cli(
        "call", "mail.messages.send", "--input", '{"to": "a@b.example", "subject": "s", "body": "b"}',
        "--as", "user:carol",
    )  # fmt: skip
    said = " ".join(sent.stderr.split())
    assert "mail.messages.send ok" in said
    assert (
        "note: mail.messages.send wrote to mail's fake in this command (REMIT_FAKES=1), which "
        "ends with it: a worker has a fake of its own and will not see this write"
    ) in said
    read = cli("call", "payments.invoices.get", "--input", '{"invoice_id": "inv_1001"}')
    assert "note:" not in read.stderr  # a read seeds nothing
