"""The console in a real browser: `remit serve --worker` on the console app, once per database
for a test module, and Chromium driven by Playwright, once with JavaScript and once without.

Chromium is the system's (`/usr/bin/chromium`, the Debian package; `.ci/run` installs it), never
a browser Playwright downloads. The flags keep it from calling out to the network, which a closed
machine refuses. Each test gets a fresh browser context (its own cookies), signs in by a link
made from the test's process, and makes runs of its own, so tests share a server but not state.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserType, Page, Playwright, expect, sync_playwright

from remit import Client
from remit.core.runs import Run
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.forked import ForkedProcess, run_remit, spawn_remit

CONSOLE_APP = Path(__file__).resolve().parent.parent / "apps" / "console_app"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parent.parent.parent / "docs" / "console"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="session")
def browser_type_launch_args() -> dict[str, Any]:
    """Launch the system's Chromium, headless, with no calls to the network of its own."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Chromium with `apt-get install -y chromium`")
    return {"executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS, "headless": True}


@pytest.fixture(params=["js", "no-js"])
def browser_context_args(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every flow twice: with JavaScript (htmx boosts the forms) and without (plain forms)."""
    return {"viewport": VIEWPORT, "java_script_enabled": request.param == "js"}


expect.set_options(timeout=15_000)


def serve_with_worker(
    app: Path, env: dict[str, str], log: Path, timeout: float = 90
) -> tuple[ForkedProcess, str]:
    """`remit serve --worker` of `app` on a free port, once it listens and serves its queues:
    the process and its URL."""
    with log.open("wb") as handle:
        proc = spawn_remit(
            ["--app", str(app), "serve", "--worker", "--port", "0"],
            env=env,
            output=handle,
            script=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", text)
        if found and "serving its queues" in text:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"remit serve exited {proc.returncode}:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"remit serve did not listen within {timeout}s:\n{log.read_text()}")


def stop_serving(proc: ForkedProcess | None) -> None:
    """Stop a `remit serve` as SIGTERM does, killing it if it takes more than 30 s."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Console:
    """`remit serve --worker` on the console app and a database of its own, with a client on
    the same database for what a test sets up and checks behind the browser's back."""

    def __init__(self, database_url: str, tmp: Path, backend: str) -> None:
        self.database_url = database_url
        self.backend = backend
        self.tmp = tmp
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_AS": "user:ann",
            "REMIT_POLL_INTERVAL": "0.1",
            "COLUMNS": "240",
        }
        for unset in ("REMIT_URL", "REMIT_TOKEN"):
            self.env.pop(unset, None)
        self.url = ""
        self.proc: ForkedProcess | None = None
        self.client = Client.connect(CONSOLE_APP, database_url, by="user:ann")

    def start(self, timeout: float = 90) -> str:
        self.proc, self.url = serve_with_worker(
            CONSOLE_APP, self.env, self.tmp / "serve.log", timeout
        )
        return self.url

    def log(self) -> str:
        path = self.tmp / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def remit(self, *args: str) -> str:
        """Run a `remit` command on the console app's database; returns what it printed."""
        done = run_remit(["--app", str(CONSOLE_APP), *args], env=self.env, script=True)
        assert done.returncode == 0, f"remit {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout.strip()

    def link(self, principal: str) -> str:
        """A one-time sign-in link for `principal`, made as `remit login-link` makes it."""
        _, code = self.client.sessions.link(principal)
        return f"{self.url}/console/sign-in?code={code}"

    def start_run(self, workflow: str, given: dict[str, Any]) -> str:
        return self.client.runs.start(workflow, given, by="user:ann").run_id

    def wait_for(self, run_id: str, *statuses: str, timeout: float = 60) -> Run:
        """The run once its status is one of `statuses`."""
        deadline = time.monotonic() + timeout
        run = self.client.runs.get(run_id)
        while run.status not in statuses:
            assert time.monotonic() < deadline, (
                f"run {run_id} is {run.status}, never {' or '.join(statuses)}:\n{self.log()[-4000:]}"
            )
            time.sleep(0.05)
            run = self.client.runs.get(run_id)
        return run

    def stop(self) -> None:
        stop_serving(self.proc)
        self.client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def console(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    """The console app served with its worker on a fresh database, once per database."""
    tmp = tmp_path_factory.mktemp(f"console-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'remit.sqlite'}"
    else:
        url = new_postgres_database()
    running = Console(url, tmp, request.param)
    try:
        running.start()
        yield running
    finally:
        running.stop()
        if request.param == "postgres":
            drop_postgres_database(url)


def sign_in(page: Page, console: Console, principal: str = "user:ann") -> None:
    """Sign `principal` in by a link, as a person does: open it, press the button."""
    page.goto(console.link(principal))
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/runs$"))
    expect(page.locator("header #principal")).to_have_text(principal)


class Shots:
    """Saves pages as docs/console/<name>.png when REMIT_CONSOLE_SCREENSHOTS=1: from the runs
    with JavaScript on SQLite only, so each page is taken once, as a person sees it."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted

    def __call__(self, page: Page, name: str) -> None:
        if self.wanted:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


@pytest.fixture
def shoot(console: Console, browser_context_args: dict[str, Any]) -> Shots:
    wanted = os.environ.get("REMIT_CONSOLE_SCREENSHOTS") == "1"
    first = console.backend == "sqlite" and browser_context_args["java_script_enabled"]
    return Shots(wanted and first)


@pytest.fixture
def js(browser_context_args: dict[str, Any]) -> bool:
    """Whether this test's browser runs JavaScript."""
    return bool(browser_context_args["java_script_enabled"])


# Playwright's own fixtures live for the whole session, and while they do its event loop runs on
# the main thread, where no test after these could then run an async workflow (asyncio.run
# refuses inside a running loop). The same fixtures, ended with this package.


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    running = sync_playwright().start()
    yield running
    running.stop()


@pytest.fixture(scope="package")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    found: BrowserType = getattr(playwright, browser_name)
    return found


@pytest.fixture(scope="package")
def launch_browser(
    browser_type_launch_args: dict[str, Any], browser_type: BrowserType
) -> Callable[..., Browser]:
    def launch(**kwargs: Any) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture(scope="package")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    launched = launch_browser()
    yield launched
    launched.close()
