"""The `cli` fixture: the `remit` command against a fresh database (SQLite and Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli_support import Cli


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(database_url, tmp_path)
    yield runner
    runner.close()
