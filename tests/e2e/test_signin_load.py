"""Signing in by password takes an argon2 check, a tenth of a second of a core: `remit serve`
does it off its event loop, so that a crowd posting wrong passwords slows no other request."""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import pytest

from tests.console_support import csrf_of
from tests.e2e.cli_support import Cli
from tests.e2e.test_cli_remote import _listening

CLIENTS = 8

# The bound is what the server promises a probe of its health while it signs people in; the
# test has the machine to itself, so that other tests' load does not stand in for the server's.
pytestmark = pytest.mark.serial


def test_health_answers_within_200_ms_p99_while_eight_clients_post_wrong_passwords(
    cli: Cli,
) -> None:
    cli.spawn("serve", "--port", "0")
    url = _listening(cli, 0)
    stop = threading.Event()
    answered: list[int] = []
    # A principal with no password costs the same check as one with (the time of an answer
    # tells nothing). Each post says it comes from an address of its own (the server trusts
    # the header from 127.0.0.1, as from a proxy there): a guesser spread over many addresses
    # is locked out of none, so every post costs a whole argon2 check.
    addresses = (f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}" for n in itertools.count(1))
    lock = threading.Lock()

    def guess() -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while not stop.is_set():
                page = http.get("/console/sign-in")
                with lock:
                    address = next(addresses)
                posted = http.post(
                    "/console/sign-in/password",
                    data={"principal": "user:nobody", "password": "a wrong guess!",
                          "csrf": csrf_of(page.text), "next": "/console/runs"},
                    headers={"X-Forwarded-For": address},
                )  # fmt: skip
                answered.append(posted.status_code)

    guessers = [threading.Thread(target=guess) for _ in range(CLIENTS)]
    for each in guessers:
        each.start()
    try:
        deadline = time.monotonic() + 60
        while len(answered) < CLIENTS:  # every client has had a wrong password refused
            assert time.monotonic() < deadline, cli.log(0)
            time.sleep(0.01)
        # At least 200 probes, and for as long as it takes the guessers to have two more
        # passwords each checked: the probes span the checks, not a gap between them.
        waits: list[float] = []
        enough = len(answered) + 2 * CLIENTS
        with httpx.Client(base_url=url, timeout=30) as http:
            while len(waits) < 200 or len(answered) < enough:
                assert time.monotonic() < deadline + 120, f"{len(answered)} posts answered"
                began = time.perf_counter()
                assert http.get("/health").status_code == 200
                waits.append(time.perf_counter() - began)
    finally:
        stop.set()
        for each in guessers:
            each.join(60)
    assert set(answered) == {401}  # each a wrong password, none locked: every one checked
    ordered = sorted(waits)
    p99 = ordered[int(len(waits) * 0.99) - 1]
    print(  # for the record (`pytest -s`): what the bound below was met by
        f"/health while {CLIENTS} clients posted {len(answered)} wrong passwords: "
        f"{len(waits)} probes, p50 {ordered[len(waits) // 2] * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms"
    )
    assert p99 < 0.2, f"/health p99 {p99 * 1000:.0f} ms while {CLIENTS} clients posted passwords"
