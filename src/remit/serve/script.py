"""Scripts of `remit demo --script FILE`: a session on the command line, played against a demo.

A script is a plain text file, one line at a time:

    # == 1. ann chases an invoice        narration, printed as it is (blank lines are skipped)
    remit runs                           the remit command line, as the default actor
    remit approve $approval --as user:carol
                                         ... as the principal `--as` names, with its token
    run=remit start chase --input '{}'   the trimmed output kept as $run for later lines
    until approval=remit approvals --pending --quiet
                                         repeated every 0.2 s, up to 30 s, until it prints
    ! remit approve $approval            must fail: a command that succeeds fails the script
    remit run write-off --input '{}' &   run in the background ...
    wait                                 ... until here, where its output is printed

A command runs as `python -m remit --app APP ARGS` with `REMIT_URL` the demo's and
`REMIT_TOKEN` the token of the principal `--as` names (removed from ARGS: through the API the
token is who acts); `$NAME` is replaced before the line is split as a shell would (shlex). A
command that works only on the app's folder and database is refused there, as it is anywhere
`REMIT_URL` is set. The first line that does not behave ends the script, naming the line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from remit.core.errors import RemitError

UNTIL_EVERY = 0.2  # seconds between the tries of an `until` line
UNTIL_FOR = 30.0  # seconds an `until` line waits before it fails
COMMAND_TIMEOUT = 300.0  # seconds one command may take

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_COMMAND = re.compile(
    rf"(?P<until>until\s+)?(?P<fails>!\s*)?(?:(?P<capture>{_NAME})=)?remit(?:\s+(?P<args>.*?))?"
    r"(?P<background>\s+&)?"
)
_VARIABLE = re.compile(rf"\$(?:\{{(?P<braced>{_NAME})\}}|(?P<plain>{_NAME}))")
_FORMS = (
    "`# narration`, `remit ARGS`, `NAME=remit ARGS`, `until NAME=remit ARGS`, `! remit ARGS`, "
    "a command ending ` &`, or `wait`"
)


class ScriptError(RemitError):
    """A script line that does not parse, or did not behave when played."""


@dataclass(frozen=True)
class Line:
    """One line of a script that does something: narration, a command, or `wait`."""

    number: int
    text: str
    kind: Literal["say", "command", "wait"]
    args: str = ""
    capture: str | None = None
    until: bool = False
    must_fail: bool = False
    background: bool = False

    def where(self) -> str:
        """The line as an error names it: its number and its text."""
        return f"line {self.number} (`{self.text}`)"


def parse_script(text: str, *, source: str = "the script") -> list[Line]:
    """The lines of a script, or a `ScriptError` naming each line that does not parse."""
    lines: list[Line] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            lines.append(Line(number, stripped, "say", args=stripped[1:].strip()))
            continue
        if stripped == "wait":
            lines.append(Line(number, stripped, "wait"))
            continue
        found = _COMMAND.fullmatch(stripped)
        if found is None:
            problems.append(f"line {number} (`{stripped}`) is none of {_FORMS}")
            continue
        line = Line(
            number,
            stripped,
            "command",
            args=found["args"] or "",
            capture=found["capture"],
            until=found["until"] is not None,
            must_fail=found["fails"] is not None,
            background=found["background"] is not None,
        )
        problem = _misused(line)
        if problem:
            problems.append(f"{line.where()} {problem}")
            continue
        lines.append(line)
    if problems:
        raise ScriptError(f"{source} does not parse: " + "; ".join(problems))
    return lines


def _misused(line: Line) -> str | None:
    """What is wrong with a command line's combination of forms, if anything."""
    if line.until and line.capture is None:
        return "waits for output it does not keep: write `until NAME=remit ...`"
    if line.background and (line.capture is not None or line.until):
        return "runs in the background, so its output cannot be kept or waited for: drop the `&`"
    if line.must_fail and (line.capture is not None or line.until):
        return "must fail, so there is no output to keep: drop `NAME=` or the `!`"
    return None


@dataclass
class _Running:
    line: Line
    process: subprocess.Popen[str]


@dataclass
class Player:
    """Plays a script's lines against an instance at `url`, printing to `out` each command and
    its output. `tokens` are the instance's, by principal; `actor` is whose acts a line with no
    `--as`. `environ` is the commands' environment (REMIT_URL and REMIT_TOKEN are set on it)."""

    app_folder: Path
    url: str
    tokens: Mapping[str, str]
    actor: str
    environ: Mapping[str, str]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    sleep: Callable[[float], None] = time.sleep
    values: dict[str, str] = field(default_factory=dict)
    _background: list[_Running] = field(default_factory=list)

    def play(self, lines: list[Line]) -> None:
        """Play every line in order; a `ScriptError` naming the first that does not behave.
        Background commands still running at the end are waited for, as by `wait`."""
        try:
            for line in lines:
                self._play(line)
            self._wait()
        finally:
            for running in self._background:
                running.process.kill()
                running.process.wait()

    def _play(self, line: Line) -> None:
        if line.kind == "say":
            self._print(line.args)
        elif line.kind == "wait":
            self._wait()
        elif line.background:
            self._print(f"$ remit {self._substituted(line)} &")
            self._background.append(_Running(line, self._spawn(line)))
        elif line.until:
            self._until(line)
        else:
            self._print(f"$ remit {self._substituted(line)}")
            code, output, errors = self._run(line)
            self._show(output + errors)
            self._judge(line, code, output)

    def _until(self, line: Line) -> None:
        self._print(f"$ until remit {self._substituted(line)}")
        deadline = time.monotonic() + UNTIL_FOR
        while True:
            code, output, errors = self._run(line)
            if code == 0 and output.strip():
                self._show(output + errors)
                self._keep(line, output)
                return
            if time.monotonic() >= deadline:
                self._show(output + errors)
                raise ScriptError(
                    f"{line.where()} printed nothing for {UNTIL_FOR:g} s"
                    + ("" if code == 0 else f" (it exited {code})")
                )
            self.sleep(UNTIL_EVERY)

    def _wait(self) -> None:
        running, self._background = self._background, []
        try:
            while running:
                each = running[0]
                output, _ = each.process.communicate(timeout=COMMAND_TIMEOUT)
                running.pop(0)
                self._print(f"-- ended: remit {self._substituted(each.line)}")
                self._show(output)
                self._judge(each.line, each.process.returncode, output)
        finally:
            self._background = running

    def _judge(self, line: Line, code: int, output: str) -> None:
        """Fail the script unless the command behaved; keep its output (stdout, trimmed) when
        the line asks."""
        if line.must_fail:
            if code == 0:
                raise ScriptError(f"{line.where()} was to fail, and it succeeded")
            return
        if code != 0:
            raise ScriptError(f"{line.where()} failed (exit {code})")
        self._keep(line, output)

    def _keep(self, line: Line, output: str) -> None:
        if line.capture is not None:
            self.values[line.capture] = output.strip()

    def _command(self, line: Line) -> tuple[list[str], dict[str, str]]:
        """The command line to run and its environment: `$NAME` replaced, `--as` taken out and
        turned into that principal's token."""
        args = shlex.split(self._substituted(line))
        principal = self.actor
        kept: list[str] = []
        taken = iter(args)
        for arg in taken:
            if arg == "--as":
                principal = next(taken, "")
            elif arg.startswith("--as="):
                principal = arg.removeprefix("--as=")
            else:
                kept.append(arg)
        token = self.tokens.get(principal)
        if token is None:
            raise ScriptError(
                f"{line.where()} acts as {principal or 'no one'}, who has no token in this demo: "
                f"act as one of {', '.join(sorted(self.tokens))}"
            )
        environ = {**self.environ, "REMIT_URL": self.url, "REMIT_TOKEN": token}
        command = [sys.executable, "-m", "remit", "--app", str(self.app_folder), *kept]
        return command, environ

    def _substituted(self, line: Line) -> str:
        def value(found: re.Match[str]) -> str:
            name = found["braced"] or found["plain"]
            if name not in self.values:
                kept = ", ".join(f"${known}" for known in sorted(self.values)) or "none yet"
                raise ScriptError(
                    f"{line.where()} uses ${name}, which no earlier line kept (kept: {kept}): "
                    f"keep it with `{name}=remit ...`"
                )
            return self.values[name]

        return _VARIABLE.sub(value, line.args)

    def _run(self, line: Line) -> tuple[int, str, str]:
        """Run a line's command; its exit code, its output and its errors."""
        command, environ = self._command(line)
        try:
            done = subprocess.run(
                command,
                env=environ,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ScriptError(f"{line.where()} took longer than {COMMAND_TIMEOUT:g} s") from None
        return done.returncode, done.stdout, done.stderr

    def _spawn(self, line: Line) -> subprocess.Popen[str]:
        command, environ = self._command(line)
        return subprocess.Popen(
            command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def _show(self, output: str) -> None:
        if output.strip():
            self._print(output.rstrip("\n"))

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)
