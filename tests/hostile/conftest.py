"""One database and one desk per backend for the whole probe suite: the example desk served by
a worker in this process, a run waiting at its write-off approval, the HTTP API over it with
ann's token, and the files the command line reads its large inputs from.

Each probe counts the rows that matter before and after it is refused, so that the probes can
share the database instead of each needing a fresh one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit import load_app
from remit.serve.api import create_api
from remit.testing import Harness
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.e2e.cli_support import ACME
from tests.hostile.desk import Desk, MiB


@pytest.fixture(scope="module", params=BACKENDS)
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database for the module, once for SQLite and once for Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'remit.sqlite'}"
        return
    url = new_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="module")
def desk(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    here = Path.cwd()
    folder = tmp_path_factory.mktemp("desk")
    os.chdir(folder)  # the secrets' key file is made in the current folder
    try:
        with Harness(load_app(ACME), database_url=database, actor="user:ann") as harness:
            started = harness.start("ar.write-off", {"invoice_id": "inv_1003"})
            gate = harness.gate(started.run_id)
            _, token = harness.client.services.tokens.create("user:ann", by="user:sam")
            api = create_api(harness.client, allowed_hosts=["testserver"])
            with TestClient(api, headers={"Authorization": f"Bearer {token}"}) as http:
                yield Desk(
                    harness=harness,
                    http=http,
                    database_url=database,
                    files=_files(folder),
                    approval=gate.id,
                    run=started.run_id,
                )
    finally:
        os.chdir(here)


def _files(folder: Path) -> Path:
    """The large inputs the probes pass by file or standard input."""
    files = folder / "files"
    files.mkdir()
    (files / "big-input.json").write_text(
        json.dumps({"invoice_id": "inv_1003", "reason": "r" * (3 * MiB)})
    )
    (files / "big-record.json").write_text(
        json.dumps({"email": "big@example.com", "note": "n" * (3 * MiB)})
    )
    (files / "big-edits.json").write_text(json.dumps({"amount": 100, "memo": "m" * (300 * 1024)}))
    (files / "broken.json").write_text('{\n  "invoice_id": "inv_1003",\n  "reason": ' + "x" * 9000)
    # 100,000 levels deep, and an integer of 5,000 digits: Python's parser gives up on both.
    deep = "[" * 100_000 + "]" * 100_000
    (files / "deep.json").write_text('{"invoice_id": "inv_1003", "reason": ' + deep + "}")
    (files / "huge-int.json").write_text('{"invoice_id": "inv_1003", "reason": ' + "9" * 5000 + "}")
    return files
