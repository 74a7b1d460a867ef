"""Hostile input on every surface (the command line, the HTTP API, the Python client), once on
SQLite and once on Postgres: each probe is refused with the right exit code, status or error,
says what is wrong, and writes no row."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest

import remit
from remit import Client
from tests.e2e.cli_support import ACME
from tests.hostile.desk import Desk
from tests.hostile.rows import CLI, CLIENT, HTTP, ClientProbe, CliProbe, HttpProbe


def _run_cli(
    desk: Desk, probe: CliProbe, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`remit ARGS` in this process, as the shell would run it: its exit code and stderr."""
    from remit.cli.main import main

    env = {
        "REMIT_DATABASE_URL": desk.database_url,
        "REMIT_FAKES": "1",
        "REMIT_ACTOR": "user:ann",
        **probe.env,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("REMIT_URL", raising=False)
    monkeypatch.setattr(sys, "argv", ["remit", "--app", str(ACME), *map(desk.fill, probe.args)])
    given = b"" if probe.stdin is None else (desk.files / probe.stdin).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given)))
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize("probe", CLI)
def test_the_command_line_refuses(
    desk: Desk,
    probe: CliProbe,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    desk.ready()
    before = desk.counts()
    code, said = _run_cli(desk, probe, monkeypatch, capsys)
    assert (code, probe.says in " ".join(said.split())) == (probe.code, True), said
    assert "Traceback" not in said
    assert len(said.strip().splitlines()) <= 4, said  # Typer's usage errors take four
    assert desk.counts() == before


@pytest.mark.parametrize("probe", HTTP)
def test_the_http_api_refuses(desk: Desk, probe: HttpProbe) -> None:
    desk.ready()
    before = desk.counts()
    response = desk.http.request(
        probe.method,
        desk.fill(probe.path),
        json=probe.body,
        content=probe.content,
        params=probe.params,
        headers={
            "Content-Type": "application/json",
            **{name: desk.fill(value) for name, value in (probe.headers or {}).items()},
        },
    )
    body: dict[str, Any] = response.json()
    said = " ".join(
        [body.get("error", ""), *(r.get("reason", "") for r in body.get("reasons", []))]
    )
    assert (response.status_code, probe.says in said) == (probe.status, True), response.text[:2000]
    assert len(response.content) < 20_000  # a refusal quotes excerpts, never the input
    assert desk.counts() == before


@pytest.mark.parametrize("probe", CLIENT)
def test_the_client_refuses(desk: Desk, probe: ClientProbe) -> None:
    client: Client = desk.harness.client
    desk.ready()
    before = desk.counts()
    expected: type[Exception] = getattr(remit, probe.error)
    with pytest.raises(expected) as raised:
        probe.call(client, desk.approval)
    assert probe.says in str(raised.value)
    assert len(str(raised.value)) < 2000
    assert desk.counts() == before
