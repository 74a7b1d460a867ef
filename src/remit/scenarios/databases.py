"""The database each scenario runs on: a fresh SQLite file by default, or a fresh database on
a Postgres server (`REMIT_SCENARIO_DATABASE_URL`, or `remit test --database-url`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import sqlalchemy as sa

from remit.core.errors import SettingsError

ENV = "REMIT_SCENARIO_DATABASE_URL"


@contextlib.contextmanager
def scenario_database(server: str | None = None) -> Iterator[str]:
    """A fresh database's URL for one scenario, removed after it.

    `server` (default `REMIT_SCENARIO_DATABASE_URL`) is `sqlite` or empty for a SQLite file
    in a temporary folder, or a Postgres URL on whose server a database is made for the
    scenario and dropped after it (its user may create databases)."""
    server = server if server is not None else os.environ.get(ENV, "")
    if server in ("", "sqlite"):
        folder = tempfile.mkdtemp(prefix="remit-scenario-")
        try:
            yield f"sqlite:///{folder}/remit.sqlite"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    if not server.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
        raise SettingsError(
            f"{ENV}={server!r}: give `sqlite`, or a Postgres URL "
            "(postgresql://user@host:5432/postgres) on whose server scenarios may make databases"
        )
    url = sa.make_url(server.replace("postgres://", "postgresql://", 1)).set(
        drivername="postgresql+psycopg"
    )
    name = f"remit_scenario_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
