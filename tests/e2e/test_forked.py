"""The e2e tests run `remit` forked from a process that has imported its libraries
(`tests/forked.py`): such a command prints, reads and ends as `python -m remit` does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from tests.e2e.cli_support import ACME, CRASH_APP, Cli
from tests.forked import run_remit

WRITE_OFF = {"invoice_id": "inv_1003", "reason": "a test"}


def _real(cli: Cli, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remit", *argv],
        input=stdin,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_forked_command_prints_what_the_real_one_prints(cli: Cli) -> None:
    written = json.dumps(WRITE_OFF)
    real_run = _real(cli, ["--app", str(ACME), "start", "ar.write-off", "--input", "-"], written)
    forked_run = run_remit(
        ["--app", str(ACME), "start", "ar.write-off", "--input", "-"], env=cli.env, input=written
    )
    assert (real_run.returncode, forked_run.returncode) == (0, 0), real_run.stderr
    started = {real_run.stdout.strip(), forked_run.stdout.strip()}
    assert started == set(cli("runs", "--quiet").stdout.split())  # both read their input

    app = ["--app", str(ACME)]
    codes = set()
    for argv in (
        [*app, "runs", "--workflow", "ar.write-off"],
        [*app, "runs", "--status", "lost"],  # refused: exit 1, one line on stderr
        [*app, "nonsense"],  # a usage error: exit 2
    ):
        real = _real(cli, argv)
        forked = run_remit(argv, env=cli.env)
        seen = (forked.returncode, forked.stdout, forked.stderr)
        assert seen == (real.returncode, real.stdout, real.stderr), argv
        codes.add(real.returncode)
    assert codes == {0, 1, 2}


def test_a_forked_worker_ends_as_a_real_one_does(cli: Cli) -> None:
    stopped = cli.worker(CRASH_APP)
    cli.wait_in_log(0, "serving")
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(30) == 0, cli.log(0)
    assert "stopped" in cli.log(0)

    killed = cli.worker(CRASH_APP)
    cli.wait_in_log(1, "serving")
    assert killed.poll() is None
    killed.kill()
    assert killed.wait(30) == -signal.SIGKILL
