"""Preparing the database: several processes at once all succeed, and the work is done once."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from remit.core.database import Database
from remit.core.errors import DatabaseError
from remit.core.schema import SCHEMA_VERSION

PREPARE = "import sys; from remit.core.database import Database; Database(sys.argv[1]).prepare(); print('prepared')"


def test_processes_preparing_at_once_all_succeed(empty_database_url: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PREPARE, empty_database_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], results
    assert all(out.strip() == "prepared" for out, _ in results)

    db = Database(empty_database_url)
    try:
        tables = set(sa.inspect(db.engine).get_table_names())
        assert {"remit_runs", "remit_ledger", "remit_meta"} <= tables
        with db.engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT key, value FROM remit_meta")).all()
        assert dict(stored) == {"schema": SCHEMA_VERSION, "dbos": "3.4.0"}
        db.prepare()  # once prepared, preparing again is a no-op
    finally:
        db.dispose()


def test_the_partial_index_of_started_calls_is_made_and_made_again(
    empty_database_url: str,
) -> None:
    """The ledger's partial index (written as DDL) is there once prepared, and a database
    prepared by a version without it gets it from the next `prepare`."""
    db = Database(empty_database_url)
    try:
        db.prepare()
        assert "remit_ledger_started" in _indexes(db)
        with db.engine.begin() as conn:
            conn.execute(sa.text("DROP INDEX remit_ledger_started"))
            conn.execute(sa.text("DELETE FROM remit_meta"))  # as if an older version prepared it
        db.prepare()
        assert "remit_ledger_started" in _indexes(db)
    finally:
        db.dispose()


def _indexes(db: Database) -> set[str]:
    return {index["name"] for index in sa.inspect(db.engine).get_indexes("remit_ledger")}


def test_an_unreachable_database_says_so() -> None:
    db = Database("postgresql://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(DatabaseError) as refused:
            db.prepare()
    finally:
        db.dispose()
    assert "cannot reach the database" in str(refused.value)
    assert "REMIT_DATABASE_URL" in str(refused.value)
