"""Scripts of `remit demo --script FILE`: a session on the command line, played against a demo.

A script is a plain text file, one line at a time:

    # == 1. ann chases an invoice        narration, printed as it is (blank lines are skipped)
    remit runs                           the remit command line, as the default actor
    remit approve $approval --as user:carol
                                         ... as the principal `--as` names, with its token
    run=remit start chase --input '{}'   the trimmed output kept as $run for later lines
    until approval=remit approvals --pending --quiet
                                         repeated until it prints, up to 180 s: every 0.2 s
                                         at first, then less often (every 2 s at most)
    ! remit approve $approval            must fail: a command that succeeds fails the script
    remit run write-off --input '{}' &   run in the background ...
    wait                                 ... until here, where its output is printed

A command runs as `python -m remit --app APP ARGS` with `REMIT_URL` the demo's and
`REMIT_TOKEN` the token of the principal `--as` names (removed from ARGS: through the API the
token is who acts). ARGS is split as a shell splits it (shlex), then `$NAME` is replaced inside
each argument, which it never splits; `$$` writes a `$`, and a kept value of several lines is
refused as an argument. A command that works only on the app's folder and database is refused
there, as it is anywhere `REMIT_URL` is set. The first line that does not behave ends the
script, naming the line.

Each command runs in a session of its own; `Player.stop` kills those still running, with
whatever they started, so a demo that stops mid-script leaves none behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from remit.core.errors import RemitError

UNTIL_EVERY = 0.2  # seconds between the first tries of an `until` line
# Each wait between tries is this much longer than the last, up to UNTIL_MOST: a command's
# start costs a core for a second, which a long wait should leave to what it waits for.
UNTIL_SLOWER = 1.5
UNTIL_MOST = 2.0
UNTIL_FOR = 180.0  # seconds an `until` line waits before it fails
COMMAND_TIMEOUT = 300.0  # seconds one command may take
STOP_WAIT = 5.0  # seconds `Player.stop` waits for a killed command to be reaped

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_COMMAND = re.compile(
    rf"(?P<until>until\s+)?(?P<fails>!\s*)?(?:(?P<capture>{_NAME})=)?remit(?:\s+(?P<args>.*?))?"
    r"(?P<background>\s+&)?"
)
# `$NAME` or `${NAME}`, a kept value; `$$`, a `$`.
_VARIABLE = re.compile(rf"\$(?:(?P<dollar>\$)|\{{(?P<braced>{_NAME})\}}|(?P<plain>{_NAME}))")
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
    # A command's arguments, split as a shell splits them, before `$NAME` is replaced.
    words: tuple[str, ...] = ()
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
        args = found["args"] or ""
        try:
            words = tuple(shlex.split(args))
        except ValueError as error:
            problems.append(
                f"line {number} (`{stripped}`) does not split as a shell splits it "
                f"({str(error).lower()}): close its quotes, or put a backslash before a quote "
                "that is part of a value"
            )
            continue
        line = Line(
            number,
            stripped,
            "command",
            args=args,
            words=words,
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


def _quoted(word: str) -> str:
    """`word` as a shell reads it back: as it is when it can be, else in double quotes when
    nothing in it is special there, else as `shlex` quotes it."""
    quoted = shlex.quote(word)
    if quoted == word or any(special in word for special in '"\\$`!'):
        return quoted
    return f'"{word}"'


@dataclass
class _Running:
    line: Line
    process: subprocess.Popen[str]


@dataclass
class Player:
    """Plays a script's lines against an instance at `url`, printing to `out` each command and
    its output. `tokens` are the instance's, by principal; `actor` is whose acts a line with no
    `--as`. `environ` is the commands' environment (REMIT_URL and REMIT_TOKEN are set on it);
    `command_timeout` how long one command may take."""

    app_folder: Path
    url: str
    tokens: Mapping[str, str]
    actor: str
    environ: Mapping[str, str]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    sleep: Callable[[float], None] = time.sleep
    command_timeout: float = COMMAND_TIMEOUT
    values: dict[str, str] = field(default_factory=dict)
    _background: list[_Running] = field(default_factory=list)
    # Every command started that has not ended, foreground or background.
    _children: list[subprocess.Popen[str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: bool = False

    @property
    def stopped(self) -> bool:
        """Whether `stop` was called: the player starts no more commands."""
        return self._stopped

    def play(self, lines: list[Line]) -> None:
        """Play every line in order; a `ScriptError` naming the first that does not behave.
        Background commands still running at the end are waited for, as by `wait`."""
        try:
            for line in lines:
                self._play(line)
            self._wait()
        finally:
            for process in self._end_children():
                for pipe in (process.stdout, process.stderr):
                    if pipe is not None:
                        pipe.close()

    def stop(self) -> None:
        """Stop the script from outside: start no more commands, and end those still running.
        Safe from another thread while `play` runs, and more than once."""
        with self._lock:
            self._stopped = True
        self._end_children()

    def _end_children(self) -> list[subprocess.Popen[str]]:
        """Kill the commands still running, each with what it started, reap them, and return
        them (their pipes are the caller's to close: another thread may be reading them)."""
        with self._lock:
            children, self._children = self._children, []
        for process in children:
            if process.returncode is None:  # not reaped: its pid is still its own
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            # A process SIGKILL does not end in time is left to the system.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_WAIT)
        return children

    def _play(self, line: Line) -> None:
        if line.kind == "say":
            self._print(line.args)
        elif line.kind == "wait":
            self._wait()
        elif line.background:
            self._print(f"$ remit {self._shown(line)} &")
            self._background.append(_Running(line, self._start(line, background=True)))
        elif line.until:
            self._until(line)
        else:
            self._print(f"$ remit {self._shown(line)}")
            code, output, errors = self._run(line)
            self._show(output + errors)
            self._judge(line, code, output)

    def _until(self, line: Line) -> None:
        self._print(f"$ until remit {self._shown(line)}")
        deadline = time.monotonic() + UNTIL_FOR
        pause = UNTIL_EVERY
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
            self.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * UNTIL_SLOWER, UNTIL_MOST)

    def _wait(self) -> None:
        running, self._background = self._background, []
        try:
            while running:
                each = running[0]
                output = self._finish(each.line, each.process, "ran in the background")[1]
                running.pop(0)
                self._print(f"-- ended: remit {self._shown(each.line)}")
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
        principal = self.actor
        kept: list[str] = []
        taken = iter(self._arguments(line))
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

    def _arguments(self, line: Line) -> list[str]:
        """The line's arguments with `$NAME` replaced in each (and `$$` made `$`)."""

        def value(found: re.Match[str]) -> str:
            if found["dollar"]:
                return "$"
            name = found["braced"] or found["plain"]
            if name not in self.values:
                kept = ", ".join(f"${known}" for known in sorted(self.values)) or "none yet"
                raise ScriptError(
                    f"{line.where()} uses ${name}, which no earlier line kept (kept: {kept}): "
                    f"keep it with `{name}=remit ...`"
                )
            kept_value = self.values[name]
            if "\n" in kept_value:
                raise ScriptError(
                    f"{line.where()} uses ${name} as an argument, and it is "
                    f"{len(kept_value.splitlines())} lines: keep one line in it (e.g. the "
                    "command that keeps it printing one id), or write a line for each"
                )
            return kept_value

        return [_VARIABLE.sub(value, word) for word in line.words]

    def _shown(self, line: Line) -> str:
        """The line's arguments as the command gets them, quoted as a shell would need."""
        return " ".join(_quoted(word) for word in self._arguments(line))

    def _run(self, line: Line) -> tuple[int, str, str]:
        """Run a line's command; its exit code, its output and its errors."""
        process = self._start(line, background=False)
        return self._finish(line, process, "took")

    def _finish(
        self, line: Line, process: subprocess.Popen[str], doing: str
    ) -> tuple[int, str, str]:
        """Wait for a line's command to end; its exit code, its output and its errors. One that
        outlives `command_timeout` fails the script, naming the line."""
        try:
            output, errors = process.communicate(timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            raise ScriptError(
                f"{line.where()} {doing} longer than {self.command_timeout:g} s"
            ) from None
        with self._lock:
            if self._stopped:  # it was killed: what it printed is not its answer
                raise ScriptError(f"the demo stopped while {line.where()} ran")
            if process in self._children:
                self._children.remove(process)
        return process.returncode, output, errors or ""

    def _start(self, line: Line, *, background: bool) -> subprocess.Popen[str]:
        """Start a line's command in a session of its own, kept for `stop` to end."""
        command, environ = self._command(line)
        with self._lock:
            if self._stopped:
                raise ScriptError(f"the demo stopped before {line.where()} ran")
            process = subprocess.Popen(
                command,
                env=environ,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if background else subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self._children.append(process)
        return process

    def _show(self, output: str) -> None:
        if output.strip():
            self._print(output.rstrip("\n"))

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)
