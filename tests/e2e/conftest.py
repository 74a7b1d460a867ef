"""The `cli` fixture: the `remit` command against a fresh database (SQLite and Postgres); the
`service` fixture: a wakeup service on loopback, on a SQLite file of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli_support import Cli
from tests.instances import WakeupService


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(database_url, tmp_path)
    yield runner
    runner.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[WakeupService]:
    running = WakeupService(tmp_path)
    try:
        running.start()
        yield running
    finally:
        running.stop()
