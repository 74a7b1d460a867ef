"""The command line through `remit serve` (`REMIT_URL` and `REMIT_TOKEN`), as an operator with
no database access runs it: the demo's flow end to end on the example desk, each act as the
token's principal under the desk's policies."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from tests.e2e.cli_support import Cli
from tests.forked import run_remit


def _listening(cli: Cli, index: int) -> str:
    deadline = time.monotonic() + 60
    while not (found := re.search(r"on (http://127\.0\.0\.1:\d+)", cli.log(index))):
        assert time.monotonic() < deadline, cli.log(index)
        time.sleep(0.05)
    return found.group(1)


class Remote:
    """`remit` on a machine with no database: only the server's address and a token."""

    def __init__(self, url: str, folder: Path) -> None:
        self.folder = folder  # an empty folder: no app, no database here
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("REMIT_") or k == "REMIT_FAKES"
        }
        self.env.update({"REMIT_URL": url, "COLUMNS": "200"})

    def __call__(
        self, *args: str, token: str | None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if token is not None:
            env["REMIT_TOKEN"] = token
        done = run_remit(["--app", str(self.folder), *args], env=env)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done


def test_the_demo_runs_through_the_api_as_each_tokens_principal(cli: Cli, tmp_path: Path) -> None:
    tokens = {
        who: cli("tokens", "create", "--for", f"user:{who}", "--as", "user:sam").stdout.strip()
        for who in ("ann", "carol", "dave")
    }
    cli.spawn("serve", "--port", "0")
    url = _listening(cli, 0)
    cli.worker()
    nowhere = tmp_path / "operator"
    nowhere.mkdir()
    remit = Remote(url, nowhere)
    ann, carol = tokens["ann"], tokens["carol"]

    # No token, or one that is not the app's: refused before anything is done.
    missing = remit("runs", token=None, check=False)
    assert missing.returncode == 1
    assert "needs an API token: pass --token or set REMIT_TOKEN" in missing.stderr
    forged = remit("runs", token="rmt_0123456789ab_" + "x" * 43, check=False)
    assert forged.returncode == 1
    assert "is not one of this app's" in forged.stderr

    # 1. ann chases an overdue invoice.
    chase = {"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}
    run_id = remit(
        "start", "ar.chase-invoice", "--input", json.dumps(chase), token=ann
    ).stdout.strip()
    cli.wait_for(run_id, "done")
    listed = remit("runs", token=ann).stdout
    assert run_id in listed
    assert "user:ann" in listed
    shown = remit("show", run_id[:12], token=ann).stdout
    assert "done" in shown
    assert "mail.messages.send" in shown
    # The budgets are the operations', which a clerk may not read (and the refusal is kept).
    hidden = remit("budgets", token=ann, check=False)
    assert hidden.returncode == 1
    assert 'user:ann may not read_operations App::"acme"' in hidden.stderr
    assert "$" in remit("budgets", token=carol).stdout

    # 2. ann proposes a write-off, which waits for approval.
    write_off = {"invoice_id": "inv_1003", "reason": "customer in administration"}
    second = remit(
        "start", "ar.write-off", "--input", json.dumps(write_off), token=ann
    ).stdout.strip()
    cli.wait_for(second, "waiting")
    approval = remit("approvals", "--pending", "--quiet", token=ann).stdout.strip()
    assert approval.startswith("apr_")

    # 3. ann may not approve the full amount; dave may do nothing; --as is not theirs to give.
    refused = remit("approve", approval, token=ann, check=False)
    assert refused.returncode == 1
    assert 'user:ann may not decide ApprovalType::"write-off"' in refused.stderr
    assert remit("pause", token=tokens["dave"], check=False).returncode == 1
    posing = remit("approve", approval, "--as", "user:carol", token=ann, check=False)
    assert posing.returncode == 1
    assert "acts as the principal of its API token" in posing.stderr
    denials = remit("denials", token=carol).stdout
    assert "user:ann" in denials
    assert "user:dave" in denials
    assert "read_operations" in denials

    # 4. carol approves it for 500.00, and the run carries on.
    approved = remit(
        "approve", approval[:10], "--edit", '{"amount": 50000}', "--reason", "settled", token=carol
    ).stdout
    assert f"{approval} approved by user:carol" in approved
    cli.wait_for(second, "done")
    timeline = remit("activity", "invoice", "inv_1003", token=carol).stdout
    assert "approval.approved" in timeline
    assert "user:carol" in timeline
    assert "mail.messages.send" in remit("ledger", "--run", second, token=carol).stdout

    # Nothing was kept on the operator's machine: no database, no key file.
    assert list(nowhere.iterdir()) == []
