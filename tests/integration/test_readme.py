"""The README's examples run as written (on both databases), and the client they show does
what they say."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from examples.acme.connectors.mail import FakeMail, Message, Sent

from remit import CallContext, Client, DriverError, load_app
from remit.testing import Harness
from tests.e2e.cli_support import ROOT
from tests.support import Purchase, Receipt, make_app, purchase

README = ROOT / "README.md"


def _snippet(section: str, number: int = 0) -> str:
    """The README section's python example `number` (counting from 0)."""
    text = README.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(found) > number, f"the README's {section} section has no python example {number}"
    return str(found[number])


def test_the_testing_example_runs(database_url: str, tmp_path: Path) -> None:
    code = _snippet("Testing an app")
    sqlite = 'url = f"sqlite:///{tmp_path}/remit.sqlite"'
    assert sqlite in code
    namespace: dict[str, Any] = {}
    before = Path.cwd()
    os.chdir(ROOT)  # the example names the app folder from the project's root
    try:
        exec(
            compile(code.replace(sqlite, f"url = {database_url!r}"), "README.md", "exec"), namespace
        )
        namespace["test_chase"](tmp_path)
    finally:
        os.chdir(before)


@pytest.mark.parametrize(
    ("number", "what"), [(1, "messages"), (2, "published state"), (3, "child runs")]
)
def test_the_concepts_examples_of_runs_that_wait_print_what_they_say(
    number: int, what: str, database_url: str
) -> None:
    code = _snippet("Concepts", number)
    sqlite = re.search(r'database_url="(sqlite:///[\w.]+)"', code)
    assert sqlite, f"the example of {what} names no SQLite file"
    printed: list[str] = []
    # Its own module (not under this file's `from __future__ import annotations`), whose
    # `print` keeps the lines.
    exec(
        compile(
            code.replace(sqlite.group(1), database_url), "README.md", "exec", dont_inherit=True
        ),
        {"print": lambda *values: printed.append(" ".join(map(str, values)))},
    )
    # Each `print(...)  # text` says what it prints.
    said = [line.split("  # ", 1)[1] for line in code.splitlines() if "print(" in line]
    assert printed == said, what


def test_the_client_example_runs_against_a_worker(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _snippet("Public API")
    monkeypatch.setenv("REMIT_DATABASE_URL", database_url)
    monkeypatch.chdir(ROOT)  # the example names the app folder from the project's root
    desk = load_app(ROOT / "examples" / "acme")
    with Harness(desk, database_url=database_url):  # the worker that serves the runs
        exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "written off"


class _TimedOutMail(FakeMail):
    """A mail API that sends the email but times out before it says so."""

    def send(self, input: Message, call: CallContext) -> Sent:
        super().send(input, call)
        raise DriverError("the mail API did not answer in time", retryable=True, status=504)


def test_the_client_example_resolves_a_task(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REMIT_DATABASE_URL", database_url)
    monkeypatch.chdir(ROOT)
    desk = load_app(ROOT / "examples" / "acme")
    mail = _TimedOutMail()
    with (
        Harness(desk, database_url=database_url, implementations={"mail": mail}) as worker,
        Client.connect(desk, by="user:ann") as client,
    ):
        invoice = {"invoice_id": "inv_1003", "reason": "customer in administration"}
        run = client.runs.start("ar.write-off", invoice)
        approval = worker.gate(run.run_id)
        client.approvals.decide(approval.id, "approved", key="ok", by="user:carol")
        worker.task(run.run_id)
        exec(compile(_snippet("Public API", 1), "README.md", "exec"), {})
        assert client.runs.get(run.run_id).status == "done"
        (sent,) = [
            row for row in client.calls.ledger(run.run_id) if row.op_id == "mail.messages.send"
        ]
        assert (sent.status, sent.tries) == ("ok", 1)
        assert sent.output == {"message_id": "msg_8812", "to": "ap@northwind.example"}
    assert len(mail.outbox) == 1  # sent once, and never again after the timeout
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("did mail.messages.send happen? ")
    assert printed[1:] == ["written off"]


def test_a_client_verb_inside_a_workflow_is_refused(database_url: str) -> None:
    with Client.connect(make_app(), database_url, by="user:ops") as client:
        handle = client.runs.start("client-inside", {"sku": "sku-1"})
        with Harness(client.app, database_url=database_url):
            run = handle.wait(timeout=30)
        assert run.status == "failed"
        assert "Client.connect was called inside a workflow" in (run.error or "")
        assert "ctx" in (run.error or "")
        assert [r.run_id for r in client.runs.list()] == [handle.run_id]  # it started nothing


def test_a_client_starts_and_reads_typed_output(database_url: str) -> None:
    with Client.connect(make_app(), database_url, by="user:ops") as client:
        handle = client.runs.start(purchase, Purchase(sku="sku-1"))
        with Harness(client.app, database_url=database_url):
            receipt = handle.output(timeout=30)
        assert isinstance(receipt, Receipt)
        assert (receipt.total, handle.get().started_by) == (1200, "user:ops")
        assert [row.op_id for row in client.calls.ledger(handle.run_id)] == [
            "shop.items.get",
            "shop.orders.create",
            "shop.emails.send",
        ]
