"""`remit demo` as a person runs it: a scripted session played against the whole app on fakes,
the line that misbehaves named, the demo served until Ctrl-C, and `remit fakes show`. The demo
runs on its own SQLite file by design, so these tests are SQLite-only."""

from __future__ import annotations

import io
import json
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

from remit.serve.script import Player, ScriptError, parse_script
from tests.forked import run_remit

DEMO_APP = Path(__file__).resolve().parent.parent / "apps" / "demo_app"

SESSION = """\
# == 1. carol opens an account by a direct call
remit call books.accounts.open --input '{"account": "acme", "balance": 100}' --as user:carol

# == 2. ann asks for a refund, which waits for a controller
run=remit start refund --input '{"account": "acme", "amount": 40}' --as user:ann
until approval=remit approvals --pending --quiet
! remit approve $approval --as user:ann
remit approve ${approval} --as=user:carol --reason "checked the books"
until done=remit runs --status done --quiet
remit show $run

# == 3. what the fake books hold, while the runs are listed
remit runs --workflow refund &
remit fakes show books &
wait
! remit run refund --input '{"account": "acme", "amount": 1}'
remit fakes show books --json
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    copied = tmp_path / "demo_app"
    shutil.copytree(DEMO_APP, copied, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    return copied


def environ(**extra: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    return {**kept, "REMIT_AS": "user:ann", "COLUMNS": "200", **extra}


def remit(
    folder: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return run_remit(["--app", str(folder), *args], env=env or environ(), timeout=timeout)


def test_a_scripted_session_plays_against_the_demo(folder: Path, tmp_path: Path) -> None:
    script = tmp_path / "session.txt"
    script.write_text(SESSION)

    done = remit(folder, "demo", "--script", str(script))

    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    assert f"{script}: every line behaved" in done.stderr
    assert "== 1. carol opens an account by a direct call" in done.stdout
    assert "books.accounts.open ok" in done.stdout
    # The captures were substituted, and ann's approval was refused by the policies.
    approval = next(
        word for word in done.stdout.split() if word.startswith("apr_") and len(word) > 10
    )
    assert f"$ remit approve {approval} --as user:ann" in done.stdout
    assert 'user:ann may not decide ApprovalType::"refund"' in done.stdout
    assert f"{approval} approved by user:carol" in done.stdout
    run = next(word for word in done.stdout.split() if word.startswith("run_"))
    assert f"$ remit show {run}\n{run}  refund  done" in done.stdout
    # The background commands' output is printed when `wait` reaches them, in order.
    runs_ended = done.stdout.index("-- ended: remit runs --workflow refund")
    books_ended = done.stdout.index("-- ended: remit fakes show books")
    assert runs_ended < books_ended
    # `remit run` is a worker on the database, refused through the demo's API with its reason.
    assert "`remit run` works on the app's folder and its database, not through" in done.stdout
    # The fake's state, after the refund: the run's credit on the account carol opened.
    state = json.loads(
        done.stdout[done.stdout.rindex("$ remit fakes show books --json") :].split("\n", 1)[1]
    )
    assert state == {
        "accounts": [{"account": "acme", "balance": 140}],
        "credits": [{"credit_id": "cr_1", "account": "acme", "amount": 40}],
    }
    table = done.stdout[books_ended:]
    for shown_there in ("cr_1", "acme", "140"):
        assert shown_there in table
    assert "Traceback" not in shown


def test_a_script_line_that_misbehaves_fails_the_demo_naming_it(
    folder: Path, tmp_path: Path
) -> None:
    script = tmp_path / "broken.txt"
    script.write_text(
        "# == a refund of a workflow that is not there\n"
        "remit runs\n"
        "remit start no-such-workflow\n"
        "remit runs --workflow never-reached\n"
    )

    done = remit(folder, "demo", "--script", str(script))

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{script}: line 3 (`remit start no-such-workflow`) failed (exit 1)" in done.stderr
    assert "never-reached" not in done.stdout


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("remit runs\nls -l\n", "line 2 (`ls -l`) is none of"),
        ("until remit approvals --quiet\n", "line 1 (`until remit approvals --quiet`) waits for"),
        ("remit approve $nothing\n", "line 1 (`remit approve $nothing`) uses $nothing, which no"),
        ("! remit runs\n", "line 1 (`! remit runs`) was to fail, and it succeeded"),
        (
            "remit runs --workflow 'refund\n",
            "line 1 (`remit runs --workflow 'refund`) does not split as a shell splits it "
            "(no closing quotation): close its quotes",
        ),
    ],
)
def test_a_script_that_does_not_hold_together_is_refused_naming_the_line(
    folder: Path, tmp_path: Path, text: str, told: str
) -> None:
    script = tmp_path / "script.txt"
    script.write_text(text)

    done = remit(folder, "demo", "--script", str(script))

    assert done.returncode == 1, done.stdout + done.stderr
    assert told in done.stderr


def test_a_connector_without_a_fake_is_refused_by_name(folder: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.txt"
    script.write_text("remit runs\n")

    done = remit(folder, "demo", "--script", str(script), env=environ(PLAIN_VENDOR="1"))

    assert done.returncode == 1, done.stdout + done.stderr
    assert "connector `notes` has no fake" in done.stderr
    assert 'give it one with `Connector("notes", fake=...)`' in done.stderr


def test_the_demo_serves_until_interrupted_and_fakes_show_finds_it(folder: Path) -> None:
    log = folder.parent / "demo.log"
    with log.open("w") as written:
        demo = subprocess.Popen(
            [sys.executable, "-m", "remit", "--app", str(folder), "demo"],
            env=environ(),
            stdout=written,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        instance_file = folder / ".remit" / "demo" / "instance.json"
        deadline = time.monotonic() + 60
        while "Ctrl-C stops the demo" not in log.read_text():
            assert demo.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        instance = json.loads(instance_file.read_text())
        url, tokens = instance["url"], instance["tokens"]
        assert url.startswith("http://127.0.0.1:")
        assert sorted(tokens) == ["user:ann", "user:carol"]
        printed = log.read_text()
        assert f"export REMIT_URL={url} REMIT_TOKEN={tokens['user:ann']}" in printed
        assert "remit fakes show VENDOR (books, wakeup)" in printed
        assert f"web console: {url}/console/" in printed
        for principal in ("user:ann", "user:carol"):
            link = re.search(rf"{principal} +({url}/console/sign-in\?code=rml_\S+)", printed)
            assert link is not None, printed
            assert httpx.get(link.group(1)).status_code == 200

        assert httpx.get(f"{url}/fakes/books").status_code == 401
        carol = {"REMIT_URL": url, "REMIT_TOKEN": tokens["user:carol"]}
        opened = remit(
            folder,
            "call",
            "books.accounts.open",
            "--input",
            '{"account": "zeta", "balance": 5}',
            env=environ(**carol),
        )
        assert opened.returncode == 0, opened.stderr

        # Found from the app folder's instance.json, with no REMIT_URL given.
        shown = remit(folder, "fakes", "show", "books")
        assert shown.returncode == 0, shown.stderr
        assert "zeta" in shown.stdout
        assert "credits: none" in shown.stdout
        unknown = remit(folder, "fakes", "show", "payments", env=environ(**carol))
        assert unknown.returncode == 1
        assert "runs no fake for the vendor `payments`" in unknown.stderr

        # A second demo of the app would wipe this one's database: it is refused.
        second = remit(folder, "demo", "--port", "0")
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"a demo of this app is already running (pid {demo.pid}, URL {url})" in second.stderr
        assert remit(folder, "fakes", "show", "books").returncode == 0
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(30)
    assert demo.returncode == 0, log.read_text()
    assert "demo stopped" in log.read_text()
    assert not instance_file.exists()
    gone = remit(folder, "fakes", "show", "books")
    assert gone.returncode == 1
    assert "no demo is running for the app in" in gone.stderr


def test_fakes_show_without_a_demo_says_to_start_one(folder: Path) -> None:
    done = remit(folder, "fakes", "show", "books")

    assert done.returncode == 1
    assert "no demo is running for the app in" in done.stderr
    assert "start one with `remit demo`" in done.stderr


def player(folder: Path, out: io.StringIO, **values: str) -> Player:
    """A player against no demo: the lines it plays fail before they would reach one."""
    return Player(
        app_folder=folder,
        url="http://127.0.0.1:9",
        tokens={"user:ann": "rmt_none"},
        actor="user:ann",
        environ=environ(),
        out=out,
        values=dict(values),
    )


def test_a_kept_value_is_one_argument_whatever_it_holds(folder: Path) -> None:
    out = io.StringIO()
    # `remit runs` takes no argument: click names the one it got, as the command received it.
    lines = parse_script("! remit runs $who\n! remit runs ${who}-and-co cost$$5\n")

    player(folder, out, who="O'Brien").play(lines)

    shown = out.getvalue()
    assert '$ remit runs "O\'Brien"' in shown
    assert "unexpected extra argument(s) (O'Brien)" in shown
    assert "unexpected extra argument(s) (O'Brien-and-co cost$5)" in shown


def test_a_kept_value_of_several_lines_is_refused_as_an_argument(folder: Path) -> None:
    lines = parse_script("# two approvals were kept\nremit approve $ids --as user:ann\n")

    with pytest.raises(ScriptError) as refused:
        player(folder, io.StringIO(), ids="apr_1\napr_2").play(lines)

    assert str(refused.value).startswith(
        "line 2 (`remit approve $ids --as user:ann`) uses $ids as an argument, and it is 2 lines"
    )


def live_children(marker: str) -> list[int]:
    """The processes whose command line holds `marker`, not yet ended."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            state = next(s for s in status.read_text().splitlines() if s.startswith("State:"))
            command = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration):
            continue
        if marker.encode() in command and "zombie" not in state:
            found.append(int(status.parent.name))
    return found


def test_a_background_command_that_outlives_its_time_fails_naming_its_line(
    folder: Path, tmp_path: Path
) -> None:
    never = tmp_path / "never-written"
    os.mkfifo(never)  # opening it to read waits for a writer that never comes
    lines = parse_script(f"remit start refund --input @{never} &\nwait\n")
    played = player(folder, io.StringIO())
    played.command_timeout = 3

    with pytest.raises(ScriptError) as failed:
        played.play(lines)

    assert str(failed.value) == (
        f"line 1 (`remit start refund --input @{never} &`) ran in the background longer than 3 s"
    )
    assert live_children(str(never)) == []


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_demo_stopped_mid_script_leaves_no_command_running(
    folder: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    never = tmp_path / "never-written"
    os.mkfifo(never)
    script = tmp_path / "script.txt"
    script.write_text(f"remit start refund --input @{never} &\nwait\n")
    demo = subprocess.Popen(
        [sys.executable, "-m", "remit", "--app", str(folder), "demo", "--script", str(script)],
        env=environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not live_children(str(never)):
            assert demo.poll() is None, demo.communicate()[0]
            assert time.monotonic() < deadline, "the background command never started"
            time.sleep(0.1)
        demo.send_signal(stop)
        shown = demo.communicate(timeout=30)[0]
    finally:
        demo.kill()
        demo.wait()

    assert demo.returncode == 1, shown
    assert f"the demo stopped before {script} ended" in shown
    deadline = time.monotonic() + 5
    while live_children(str(never)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_children(str(never)) == []
