"""`remit wakeup accounts` and `remit wakeup serve` as processes, on SQLite and on Postgres:
a service killed mid-call, and two services sharing one database."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import httpx
import pytest

from remit.core.wakeup_tokens import mint_instance_token
from remit.wakeup.store import WakeupStore
from tests.forked import run_remit
from tests.wakeup_support import Instances, wait_until

SERVE = [sys.executable, "-m", "remit", "wakeup", "serve", "--port", "0"]
# The whole line: a log read as it is written may end mid-address.
LISTENING = re.compile(r"wakeup service listening on (http://\S+)\n")


def remit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_remit(list(args), env={**os.environ, "COLUMNS": "200", **(env or {})})


class Services:
    """`remit wakeup serve` processes on one database, each on a free port."""

    def __init__(self, database_url: str, tmp: Path) -> None:
        self.database_url = database_url
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[IO[str]] = []
        self.urls: list[str] = []

    def start(self, *, lease: float = 30.0) -> str:
        path = self.tmp / f"service-{len(self.procs)}.log"
        log = path.open("w")
        self.logs.append(log)
        proc = subprocess.Popen(
            [*SERVE, "--database", self.database_url, "--allow-private"],
            env={**os.environ, "REMIT_WAKEUP_LEASE": str(lease), "REMIT_LOG_LEVEL": "DEBUG"},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)

        def listening() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"the service exited: {path.read_text()}")
            found = LISTENING.search(path.read_text())
            return found.group(1) if found else None

        url = str(wait_until(listening, "the service to listen"))
        self.urls.append(url)
        return url

    def log(self, index: int) -> str:
        return (self.tmp / f"service-{index}.log").read_text()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for log in self.logs:
            log.close()


@pytest.fixture
def services(empty_database_url: str, tmp_path: Path) -> Iterator[Services]:
    made = Services(empty_database_url, tmp_path)
    yield made
    made.close()


@pytest.fixture
def instances_server() -> Iterator[Instances]:
    server = Instances()
    yield server
    server.close()


def _account(database_url: str) -> str:
    done = remit("wakeup", "accounts", "create", "acme", "--database", database_url)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _register(service: str, account: str, url: str) -> tuple[str, str]:
    token = mint_instance_token()
    answer = httpx.post(
        f"{service}/wakeup/instances",
        json={"url": url, "token": token},
        headers={"Authorization": f"Bearer {account}"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"], token


def _wake_now(service: str, token: str) -> None:
    answer = httpx.put(
        f"{service}/wakeup/wake",
        json={"at": datetime.now(UTC).isoformat()},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 204, answer.text


def _shown(service: str, account: str, instance_id: str) -> dict[str, object]:
    answer = httpx.get(
        f"{service}/wakeup/instances/{instance_id}",
        headers={"Authorization": f"Bearer {account}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    shown: dict[str, object] = answer.json()
    return shown


def test_accounts_create_prints_one_token_and_list_never_shows_it(
    empty_database_url: str,
) -> None:
    done = remit("wakeup", "accounts", "create", "acme", "--database", empty_database_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"rwa_[A-Za-z0-9_-]{43}", lines[0])
    listed = remit(
        "wakeup", "accounts", "list", env={"REMIT_WAKEUP_DATABASE_URL": empty_database_url}
    )
    assert listed.returncode == 0, listed.stderr
    assert "acme" in listed.stdout
    assert lines[0] not in listed.stdout + listed.stderr
    as_json = remit(
        "wakeup",
        "accounts",
        "list",
        "--json",
        env={"REMIT_WAKEUP_DATABASE_URL": empty_database_url},
    )
    [account] = json.loads(as_json.stdout)
    assert set(account) == {"id", "label", "created_at"}
    assert account["label"] == "acme"


def test_the_default_database_is_a_private_file_in_dot_remit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "remit", "wakeup", "accounts", "create", "acme"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "REMIT_WAKEUP_DATABASE_URL"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    folder = tmp_path / ".remit"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / "wakeup.sqlite").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://x@localhost/db", "postgresql:// or sqlite://"),
        ("sqlite:////no/such/folder/wakeup.sqlite", "does not exist"),
        ("not a url", "cannot be parsed"),
        (
            "postgresql://nobody:s3cret@127.0.0.1:1/wakeup",
            "cannot open the wakeup service's database at postgresql://nobody@127.0.0.1:1/wakeup "
            "(connection failed: ",
        ),
    ],
)
def test_a_bad_database_url_is_one_line_and_exit_1(url: str, says: str) -> None:
    done = remit("wakeup", "accounts", "create", "acme", "--database", url)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error:")
    assert says in lines[0]


def test_serve_answers_and_stops_on_sigterm(services: Services) -> None:
    url = services.start()
    assert httpx.get(f"{url}/health", timeout=30).json() == {"ok": True}
    proc = services.procs[0]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert "wakeup service stopped" in services.log(0)


def test_a_wake_in_flight_when_its_service_is_killed_is_called_again_after_its_lease(
    services: Services, instances_server: Instances
) -> None:
    account = _account(services.database_url)
    first = services.start(lease=2.0)
    instance_id, token = _register(first, account, f"{instances_server.url}/i/1")
    instances_server.hold("/i/1")
    _wake_now(first, token)
    instances_server.wait_calls("/i/1", 1)
    services.procs[0].send_signal(signal.SIGKILL)
    services.procs[0].wait(30)
    instances_server.release("/i/1")
    second = services.start(lease=2.0)
    instances_server.wait_calls("/i/1", 2)
    shown = wait_until(
        lambda: (s := _shown(second, account, instance_id))["called_at"] and s,
        "the second call to be recorded",
    )
    assert (shown["attempts"], shown["last_error"]) == (0, None)
    assert instances_server.count("/i/1") == 2


def test_two_services_on_one_database_call_each_instance_exactly_once(
    services: Services, instances_server: Instances
) -> None:
    account = _account(services.database_url)
    urls = [services.start(), services.start()]
    registered = [
        _register(urls[n % 2], account, f"{instances_server.url}/i/{n}") for n in range(200)
    ]
    # Every wake is set through one service or the other: both are poked, and both claim.
    for n, (_, token) in enumerate(registered):
        _wake_now(urls[n % 2], token)
    store = WakeupStore(services.database_url)
    try:

        def recorded() -> bool:
            return all(
                (found := store.instance(instance_id)) is not None and found.called_at is not None
                for instance_id, _ in registered
            )

        for n in range(200):
            instances_server.wait_calls(f"/i/{n}", 1, timeout=120)
        wait_until(recorded, "every call to be recorded")
    finally:
        store.dispose()
    for proc in services.procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    counts = {n: instances_server.count(f"/i/{n}") for n in range(200)}
    assert counts == dict.fromkeys(range(200), 1)
    assert all("wakeup: called" in services.log(i) for i in (0, 1))


def test_no_token_reaches_the_services_log(services: Services, instances_server: Instances) -> None:
    account = _account(services.database_url)
    url = services.start()
    instances_server.status["/i/1"] = 500
    instance_id, token = _register(url, account, f"{instances_server.url}/i/1")
    _wake_now(url, token)
    wait_until(lambda: _shown(url, account, instance_id)["attempts"], "a failed call")
    instances_server.status["/i/1"] = 200
    wait_until(lambda: _shown(url, account, instance_id)["called_at"], "a call", timeout=90)
    services.procs[0].send_signal(signal.SIGTERM)
    services.procs[0].wait(60)
    logged = services.log(0)
    assert "/i/1/wake" in logged
    for secret in (token, account):
        assert secret not in logged
        assert secret[4:16] not in logged
