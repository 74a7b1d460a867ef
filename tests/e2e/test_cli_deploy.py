"""Shipping new code under a waiting run, as a user does it: `remit deploy check` against a copy
of the example repo whose write-off gains a step before its gate, then `remit retry`."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from remit.core.runs import RunStore
from tests.e2e.cli_support import ACME, Cli
from tests.integration.test_deploy_check import dump

GATE_LINE = '    decision = ctx.approval(\n        "write-off",'
NEW_STEP = '    ctx.step("credit-check", lambda: "checked")\n'
GUARDED = '    if ctx.patch("credit-check"):\n        ctx.step("credit-check", lambda: "checked")\n'
WRITE_OFF = Path("apps", "ar", "workflows", "write_off.py")


def _desk(tmp: Path, before_gate: str) -> Path:
    """A copy of the example repo with `before_gate` inserted before its write-off's gate."""
    folder = tmp / "desk"
    if not folder.exists():
        shutil.copytree(ACME, folder, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
        (folder / "write_off.py.orig").write_text((ACME / WRITE_OFF).read_text())
    source = (folder / "write_off.py.orig").read_text()
    assert source.count(GATE_LINE) == 1
    (folder / WRITE_OFF).write_text(source.replace(GATE_LINE, before_gate + GATE_LINE))
    shutil.rmtree(folder / WRITE_OFF.parent / "__pycache__", ignore_errors=True)
    return folder


def test_deploy_check_gates_a_deploy_and_retry_carries_a_failed_run_on(cli: Cli) -> None:
    desk = _desk(cli.tmp, "")
    worker = cli.worker(desk)
    run_id = cli(
        "start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}', app=desk
    ).stdout.strip()
    approval = cli.pending_approvals(run_id)[0]
    cli.wait_for(run_id, "waiting")
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)

    before = dump(cli.db)
    unguarded = cli("deploy", "check", app=_desk(cli.tmp, NEW_STEP), check=False)
    assert unguarded.returncode == 1, unguarded.stdout + unguarded.stderr
    assert f"would fail {run_id} (ar.write-off, waiting, resumes at step 2)" in unguarded.stdout
    assert "its step 2 ran the approval gate `write-off`" in unguarded.stdout
    assert "0 of 1 unfinished run would carry on, 1 would fail" in unguarded.stdout

    guarded = cli("deploy", "check", app=_desk(cli.tmp, GUARDED))
    assert "1 of 1 unfinished run would carry on, 0 would fail" in guarded.stdout
    assert "would fail" not in guarded.stdout.replace("0 would fail", "")
    assert dump(cli.db) == before  # the checks wrote nothing, started nothing

    # Shipped unguarded all the same: the decision fails the run, and nothing runs at the gate.
    cli.worker(_desk(cli.tmp, NEW_STEP))
    cli("approve", approval, "--as", "user:carol", app=desk)
    cli.wait_for(run_id, "failed")
    run = RunStore(cli.db).get(run_id)
    assert "now runs `credit-check` (a step) there" in (run.error or "")
    client = cli.db.client("acme")
    try:
        ran = [s["function_name"] for s in client.list_workflow_steps(f"{run_id}:2")]
    finally:
        client.destroy()
    assert ran == ["payments.invoices.get"]  # the read, copied; nothing ran at the gate

    # The fix shipped, a controller retries it: it carries on from its gate, decided.
    cli.close()
    fixed = _desk(cli.tmp, GUARDED)
    refused = cli("retry", run_id, "--as", "user:ann", app=fixed, check=False)
    assert refused.returncode == 1
    assert 'user:ann may not retry Workflow::"ar.write-off"' in refused.stderr
    retried = cli("retry", run_id, "--as", "user:carol", "--key", "fix-1", app=fixed)
    assert f"{run_id} retried: attempt 3 ({run_id}:3) carries on from step 2" in retried.stdout
    again = cli("retry", run_id, "--as", "user:carol", "--key", "fix-1", app=fixed)
    assert "was used before" in again.stderr
    cli.worker(fixed)
    cli.wait_for(run_id, "done")
    done = RunStore(cli.db).get(run_id)
    assert done.output is not None
    assert done.output["outcome"] == "written off"
    assert done.attempt == 3
