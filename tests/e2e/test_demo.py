"""`make demo` plays the example repo's tour (`remit demo --script demo/tour.remit`) on fakes,
as a newcomer does on a fresh machine: it ends well and shows each step it promises. A demo
runs on its own SQLite file by design, so this runs on SQLite only; every flow in it is tested
on both databases elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.cli_support import ACME

# The tour ends with a change whose checks are processes of their own: on a loaded machine it
# takes minutes.
pytestmark = pytest.mark.timeout(900)

MAKEFILE = ACME.parent.parent / "Makefile"


def test_make_demo_plays_the_tour_script() -> None:
    recipe = MAKEFILE.read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "remit --app examples/acme demo --script examples/acme/demo/tour.remit" in recipe


def test_the_demo_shows_each_step_and_ends_well(tmp_path: Path) -> None:
    repo = tmp_path / "acme"
    shutil.copytree(ACME, repo, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    remit = Path(sys.executable).parent / "remit"
    done = subprocess.run(
        [str(remit), "--app", str(repo), "demo", "--script", str(repo / "demo" / "tour.remit")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    for step in (
        "demo of acme on http://127.0.0.1:",
        # 1. ann chases: the model's draft, the email, the reminder counted, the contact kept
        "== 1. ann (a clerk) chases an overdue invoice",
        '"outcome": "final reminder sent", "days_overdue": 45',
        '"reminders_sent": 1',
        "data.ar.contacts.put",
        # 2. the write-off waits at its gate
        "== 2. ann proposes writing off inv_1003",
        "ar.write-off  waiting",
        # 3. ann may not approve 612.50
        "error: decision refused, nothing was written",
        'user:ann may not decide ApprovalType::"write-off": no policy permits it',
        # 4. carol approves 500.00 with her token: the run carries on from its gate
        "approved by user:carol",
        '"amount": 50000, "credit_note_id": "cn_0001", "decided_by": "user:carol"',
        "approved by user:carol via http (edited)",
        # 5. the invoice's activity
        "started ar.write-off",
        "approval.approved",
        "settled 500.00 with the administrator",
        "ar.write-off done",
        # 6. dunning sends its first reminder and waits for the payments feed
        "ar.dunning  waiting",
        "waits for a message on paid",
        '"outcome": "paid", "reminders": 1',
        "ap@tailspin.example",
        # 7. the fakes: the credit note, the balance left, every email sent
        "payments (fake)",
        "Written off: customer in administration",
        "mail (fake)",
        "Invoice inv_1003: 500.00 EUR credited",
        "Invoice inv_1004: 2,450.00 EUR is open (friendly reminder)",
        # 8. the repo's apps
        "ar.chase-invoice ar.credit-line ar.credit-note ar.dunning ar.follow-up ar.write-off",
        "ar.contacts",
        # 9. a write-off left waiting for the console
        "== 9. ann proposes writing off inv_1001",
        # 10. a change of the branch desk-notes: checked, reviewed by carol, merged, deployed
        "== 10. a change to the repo, from its branch to the desk's container",
        "of desk-notes into main: opened",
        "approved by user:carol\n",
        # 11. the operator agent: a question answered from the instance, a start tried in a
        # sandbox and confirmed
        "== 11. carol asks the operator agent why the write-off of inv_1001 waits",
        "read: why_waiting(run_id=run_",
        "waits at the approval apr_",
        "sandbox: Tried ar.chase-invoice on fresh fakes: done",
        "act: Done: Started run_",
        "demo/tour.remit: every line behaved",
    ):
        assert step in shown, step
    # The change waited for its review with every check passed, then was deployed to the
    # desk's container, healthy.
    assert re.search(r"chg_[0-9a-f]{12} +desk-notes +review +[0-9a-f]{12} +user:sam +#1 ", shown)
    assert re.search(r"chg_[0-9a-f]{12} +desk-notes +deployed +[0-9a-f]{12} +user:sam ", shown)
    assert re.search(r"site +[0-9a-f]{12} +deploy +healthy +chg_[0-9a-f]{12} +run_", shown), shown
    # The demo bound what it deployed in its own lockfile, not the example's.
    assert not (repo / "remit.lock").exists()
    # The budget: the chase's model call settled, nothing left reserved.
    assert re.search(r"app +\d{4}-\d{2} +\$5\.00 +\$0\.0000\d+ +\$0\.00 ", shown), shown
    # The denial is listed, with its reason.
    assert re.search(r"user:ann .* decide .* write-off .* no policy permits it", shown), shown
    # What the payments fake holds: inv_1003's balance after the credit note, inv_1004 paid.
    assert re.search(r"inv_1003 .* 11250 ", shown), shown
    assert re.search(r"inv_1004 .* ap@tailspin\.example .* 0 .* paid ", shown), shown
    assert "Traceback" not in shown
    assert re.search(r"rmt_[A-Za-z0-9]", shown) is None  # no API token is ever printed
    # Not in a terminal, the demo stops after its script: no console links to a stopped server.
    assert "rml_" not in shown
    # The commands the script ran are gone with it.
    left = subprocess.run(["pgrep", "-f", f"--app {repo}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_after_the_tour_carol_signs_in_by_its_link_and_the_write_off_waits_in_her_inbox(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "acme"
    shutil.copytree(ACME, repo, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    remit = Path(sys.executable).parent / "remit"
    log = tmp_path / "demo.log"
    script = str(repo / "demo" / "tour.remit")
    with log.open("w") as written:
        demo = subprocess.Popen(
            [str(remit), "--app", str(repo), "demo", "--script", script, "--stay"],
            cwd=tmp_path,
            env={**env, "COLUMNS": "250"},
            stdout=written,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 800
        while "the demo serves on: Ctrl-C stops it" not in log.read_text():
            assert demo.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        shown = log.read_text()
        link = re.search(
            r"user:carol +(http://127\.0\.0\.1:\d+/console/sign-in\?code=rml_\S+)", shown
        )
        assert link is not None, shown
        base = link.group(1).split("/console/")[0]
        with httpx.Client(base_url=base) as browser:
            opened = browser.get(link.group(1))
            csrf = re.search(r'name="csrf" value="([^"]+)"', opened.text)
            code = re.search(r'name="code" value="([^"]+)"', opened.text)
            assert csrf is not None, opened.text
            assert code is not None, opened.text
            signed = browser.post(
                "/console/sign-in",
                data={"csrf": csrf.group(1), "code": code.group(1), "next": "/console/inbox"},
            )
            assert signed.status_code == 303, signed.text
            inbox = browser.get("/console/inbox")
        assert inbox.status_code == 200
        assert '<strong id="principal">user:carol</strong>' in inbox.text
        assert inbox.text.count('class="gate') >= 1, inbox.text
        assert "inv_1001" in inbox.text
        assert "disputed delivery" in inbox.text
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(60)
    assert demo.returncode == 0, log.read_text()
