"""`remit wakeup status` after the worker of `remit serve --worker` has gone: it says when the
worker's last heartbeat was, and calls a worker gone once it has stopped, or once its heartbeat
is older than REMIT_DEAD_AFTER, whatever the wakeup row last said."""

from __future__ import annotations

import re
import signal
import time

from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import _listening

WORKER_LINE = re.compile(r"^worker: +(.*)$", re.MULTILINE)


def _worker(cli: Cli) -> str:
    found = WORKER_LINE.search(cli("wakeup", "status").stdout)
    assert found is not None
    return found.group(1)


def test_a_worker_that_stopped_is_gone_with_its_last_heartbeat(cli: Cli) -> None:
    served = cli.spawn("serve", "--worker", "--port", "0")
    _listening(cli, 0)
    cli.wait_in_log(0, "started")
    running = _worker(cli)
    assert re.fullmatch(
        r"running \(last heartbeat \d+s ago, at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)", running
    ), running

    served.send_signal(signal.SIGTERM)
    assert served.wait(60) == 0
    gone = _worker(cli)
    assert re.fullmatch(
        r"gone: it stopped at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(last heartbeat \S+ ago, at "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)",
        gone,
    ), gone


def test_a_worker_whose_heartbeat_stopped_is_gone(cli: Cli) -> None:
    cli.env.update(REMIT_HEARTBEAT_INTERVAL="0.5", REMIT_DEAD_AFTER="2")
    served = cli.spawn("serve", "--worker", "--port", "0")
    _listening(cli, 0)
    cli.wait_in_log(0, "started")
    served.kill()  # no chance to say it stopped
    served.wait(60)
    deadline = time.monotonic() + 30
    while (shown := _worker(cli)).startswith("running"):
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert re.fullmatch(
        r"gone: its last heartbeat \S+ ago, at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, past "
        r"REMIT_DEAD_AFTER \(2s\): it exited or hangs without saying so",
        shown,
    ), shown
