"""The sandbox: a workflow run once on fresh fakes, in a database of its own, to see what it
would do before anyone starts it for real.

`try_workflow` runs `remit try` in a process of its own, with a fresh SQLite database, every
connector on its fake, a fakes folder of its own and none of the live instance's settings or
credentials: the live ledger, budgets, collections and fakes never see the run. What it gives
back is a `SandboxResult`: the run's status, its steps, and every op call it made, with what
each was sent. The chat shows it before a person confirms the real start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from remit.core.errors import RemitError

# What the sandbox's process is given of the environment: where programs and Python's packages
# are, the home folder, the login and the locale. Never remit's settings (the live database,
# the wakeup service, the secret key) nor a vendor's credentials (as `remit test` in a change's
# checks, `changes/checks.py`).
SANDBOX_SEES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
)
# How much of the sandbox's error output an error quotes.
QUOTED_CHARS = 2000
# Seconds the sandbox's process may take beyond the run's own timeout: starting Python,
# loading the app, making the database.
STARTUP_SECONDS = 60.0


class SandboxStep(BaseModel):
    """One step of the run in the sandbox, in order: its position (DBOS's step number), its
    name, how it ended (`ok`, `failed`, or the ledger's status of the call it made) and the op
    it called, if it called one."""

    position: int
    name: str
    status: str
    op: str | None = None


class SandboxCall(BaseModel):
    """One op call the run made in the sandbox: the op, `read` or `write`, what it was sent
    and what it answered (None when it failed or has not answered)."""

    op: str
    effect: str
    input: dict[str, Any]
    output: Any | None = None


class SandboxResult(BaseModel):
    """What a workflow did on fresh fakes, from its start until it rested.

    `status` is the run's status there: `done`, `failed` or `cancelled`, or `waiting`,
    `sleeping` or `paused` when it rested waiting for someone or something (the sandbox decides
    nothing), or `running` if it had not rested within the timeout. `calls` are every op call
    it made (and the runs it started made), in order, from the sandbox's own ledger;
    `waiting` says what it waits for, a line each."""

    workflow: str
    input: dict[str, Any]
    status: str
    output: Any | None = None
    error: str | None = None
    steps: list[SandboxStep]
    calls: list[SandboxCall]
    waiting: list[str]


def try_workflow(
    app_folder: Path,
    workflow: str,
    input: dict[str, Any],
    *,
    timeout: float = 120.0,
    environ: Mapping[str, str] | None = None,
    by: str | None = None,
) -> SandboxResult:
    """Run `workflow` of the app in `app_folder` once with `input` in a sandbox, and return
    what it did: `remit try ... --json` in a process of its own, given only `SANDBOX_SEES` of
    `environ` (default: this process's environment), started as `by` (default: the login)
    under the app's policies, waiting at most `timeout` seconds for the run to rest.

    Raises `RemitError` naming the workflow, with the end of what the process said, when the
    sandbox could not run it: an unknown workflow, an input its model refuses, a start the
    policies refuse, or a process that failed or printed no result."""
    given = os.environ if environ is None else environ
    env = {name: given[name] for name in SANDBOX_SEES if name in given}
    env["REMIT_FAKES"] = "1"
    command = [
        sys.executable,
        "-m",
        "remit",
        "--app",
        str(Path(app_folder).resolve()),
        "try",
        workflow,
        "--input",
        "-",
        "--json",
        "--timeout",
        f"{timeout:g}",
    ]
    if by is not None:
        command += ["--as", by]
    # The sandbox's own folder as its current one: nothing it writes lands beside the caller.
    with tempfile.TemporaryDirectory(prefix="remit-try-") as cwd:
        try:
            done = subprocess.run(
                command,
                input=json.dumps(input),
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=timeout + STARTUP_SECONDS,
            )
        except subprocess.TimeoutExpired as expired:
            raise RemitError(
                f"the sandbox of `{workflow}` did not end within {timeout + STARTUP_SECONDS:g} "
                f"s and was stopped{_quoted(_text(expired.stderr))}"
            ) from None
    if done.returncode != 0:
        raise RemitError(
            f"the sandbox could not run `{workflow}` (`remit try` exited {done.returncode})"
            f"{_quoted(done.stderr)}"
        )
    try:
        return SandboxResult.model_validate_json(done.stdout)
    except ValidationError:
        raise RemitError(
            f"the sandbox of `{workflow}` printed no result (`remit try --json` printed "
            f"{len(done.stdout)} characters that are not one)"
            f"{_quoted(done.stderr or done.stdout)}"
        ) from None


def _text(output: str | bytes | None) -> str:
    if output is None:
        return ""
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output


def _quoted(said: str) -> str:
    """The end of what the sandbox's process said, to follow an error's message."""
    said = said.strip()
    if not said:
        return ""
    if len(said) > QUOTED_CHARS:
        said = "…" + said[-QUOTED_CHARS:]
    return f":\n{said}"
