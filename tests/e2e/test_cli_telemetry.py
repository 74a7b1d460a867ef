"""Log lines as a user asks for them: `REMIT_LOG_FORMAT=json` makes each one a JSON object."""

from __future__ import annotations

import json
import re
from datetime import datetime

from tests.e2e.cli_support import ROOT, Cli

TELEMETRY_APP = ROOT / "tests" / "apps" / "telemetry_app"

# What a text log line starts with: remit's format, and DBOS's own.
TEXT_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ |^\d\d:\d\d:\d\d \[\s*[A-Z]+\]")


def test_json_logs_are_one_object_a_line_and_name_the_run(cli: Cli) -> None:
    cli.env.update(REMIT_LOG_FORMAT="json", REMIT_LOG_LEVEL="INFO")

    done = cli("run", "ask", "--input", '{"text": "a flaky question"}', app=TELEMETRY_APP)

    started = re.search(r"started (run_\w+)", done.stderr)
    assert started is not None, done.stderr
    run_id = started.group(1)
    lines = done.stderr.splitlines()
    assert not [line for line in lines if TEXT_LOG.match(line)], done.stderr
    records = [json.loads(line) for line in lines if line.startswith("{")]
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys()
        assert datetime.fromisoformat(record["time"]).tzinfo is not None
    # The op's retry is logged inside the run, and says so.
    [retry] = [r for r in records if "trying again" in r["message"]]
    assert retry["level"] == "INFO"
    assert retry["logger"] == "remit.calls"
    assert (retry["run_id"], retry["attempt"], retry["workflow"], retry["op"]) == (
        run_id,
        1,
        "ask",
        "talk.replies.create",
    )
    # No tracer provider in this process: no trace ids.
    assert "trace_id" not in retry
    # DBOS's own lines are JSON too.
    assert any(r["logger"] == "dbos" for r in records)
    # A line written outside any run names none.
    assert any("run_id" not in r for r in records)


def test_an_unknown_log_format_is_refused_with_the_setting_named(cli: Cli) -> None:
    cli.env.update(REMIT_LOG_FORMAT="yaml")

    done = cli("runs", check=False)

    assert done.returncode == 1
    assert "REMIT_LOG_FORMAT='yaml' is not a log format: use text (the default) or json" in (
        done.stderr.replace("\n", " ")
    )


WRITE_OFF = '{"invoice_id": "inv_1003"}'


def test_a_commands_output_carries_no_log_line_of_what_it_set_off(cli: Cli) -> None:
    cli.env["REMIT_LOG_LEVEL"] = "DEBUG"

    started = cli("start", "ar.write-off", "--input", WRITE_OFF)
    assert re.fullmatch(r"run_[0-9a-f]{16}\n", started.stdout), started.stdout

    # Served here, the run stops at its gate: every log line of the worker is on stderr, and
    # the command says itself, once, that the run waits and how to decide it.
    served = cli("run", "ar.write-off", "--input", WRITE_OFF, "--timeout", "3", check=False)
    assert served.returncode == 1  # not done
    assert not [line for line in served.stdout.splitlines() if TEXT_LOG.match(line)]
    assert "ar.write-off  waiting" in served.stdout
    assert any(TEXT_LOG.match(line) for line in served.stderr.splitlines())  # DEBUG, there
    told = re.findall(r"^(run_\w+) waits at approval (apr_\w+) \(", served.stderr, re.MULTILINE)
    assert len(told) == 1, served.stderr
    approval = told[0][1]
    assert f"decide it with `remit approve {approval}` or `remit reject {approval}`" in (
        " ".join(served.stderr.split())
    )


def test_the_log_notifier_tells_of_a_waiting_gate_at_info(cli: Cli) -> None:
    cli.env["REMIT_LOG_LEVEL"] = "INFO"
    served = cli("run", "ar.write-off", "--input", WRITE_OFF, "--timeout", "3", check=False)
    assert "INFO remit.notify: approval apr_" in served.stderr
    assert "WARNING remit.notify" not in served.stderr


def test_a_serving_worker_tells_of_a_waiting_gate_by_default(cli: Cli) -> None:
    cli.env.pop("REMIT_LOG_LEVEL", None)
    cli.worker()
    cli.wait_in_log(0, "serving")
    started = cli("start", "ar.write-off", "--input", WRITE_OFF)
    # `remit start` says what it started and carries no log line of what its run does.
    assert started.stdout.startswith("run_"), started.stdout
    assert "remit.notify" not in started.stdout + started.stderr
    (approval,) = cli.pending_approvals(started.stdout.strip())
    cli.wait_in_log(0, f"INFO remit.notify: approval {approval} waits")
