"""The database guards: a session that holds a run's row never hangs a person's answer.

On Postgres a decision, a task's answer, a retry, a message and the reconciler's moves of a run
wait at most `REMIT_LOCK_TIMEOUT` for a row lock, then fail naming who holds it, having written nothing; a
session of remit's left idle inside a transaction is ended by the server after
`REMIT_IDLE_TRANSACTION_TIMEOUT`, letting go of its locks; `remit worker` and `remit serve`
create the database the URL names when the server has none. SQLite has one writer at a time:
an answer there waits for the write lock (up to its busy timeout) and then goes through.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit import Client
from remit.core.database import Database
from remit.core.errors import DatabaseError, RowLocked
from remit.core.fence import lock
from remit.core.settings import Settings
from remit.serve.api import create_api
from remit.testing import Harness
from tests.conftest import drop_postgres_database, new_postgres_database, postgres_admin_url
from tests.processes import CRASH_APP
from tests.support import make_app


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh Postgres database: the guards are Postgres's (SQLite has no row locks)."""
    url = new_postgres_database()
    yield url
    drop_postgres_database(url)


def guarded_client(h: Harness, url: str, **env: str) -> Client:
    """A client of the harness's app whose guards are as `env` sets them."""
    settings = Settings.from_env(".", environ={"REMIT_DATABASE_URL": url, **env})
    return Client(h.app, replace(settings, fakes=True, actor="user:test"))


@contextlib.contextmanager
def held_row(url: str, run_id: str) -> Iterator[None]:
    """A session of someone else's (a console left open, a script paused in a debugger) inside
    a transaction that has locked the run's row and sits idle, till the block ends."""
    plain = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, application_name="reporting-script") as session:
        session.execute("SELECT 1 FROM remit_runs WHERE run_id = %s FOR UPDATE", (run_id,))
        try:
            yield
        finally:
            session.rollback()


def test_a_decision_blocked_by_a_held_row_fails_naming_the_holder_and_writes_nothing(
    postgres_url: str,
) -> None:
    with Harness(make_app(), database_url=postgres_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        gate = h.gate(run.run_id)
        guarded = guarded_client(h, postgres_url, REMIT_LOCK_TIMEOUT="1")
        with held_row(postgres_url, run.run_id):
            began = time.monotonic()
            with pytest.raises(RowLocked) as refused:
                guarded.approvals.decide(gate.id, "approved", key="k-1", by="user:test")
            took = time.monotonic() - began
            said = str(refused.value)
            assert "the run is locked by session" in said, said
            assert "reporting-script" in said, said
            assert "idle in transaction" in said, said
            assert "REMIT_LOCK_TIMEOUT" in said, said
            assert "try again" in said, said
            assert took < 10, took
            # Over the API: 503, with the same words, and Retry-After.
            _, token = guarded.services.tokens.create("user:test", by="user:test")
            api = create_api(guarded, allowed_hosts=["testserver"])
            with TestClient(api, headers={"Authorization": f"Bearer {token}"}) as http:
                answered = http.post(
                    f"/approvals/{gate.id}/decision",
                    json={"decision": "approved"},
                    headers={"Idempotency-Key": "k-2"},
                )
            assert answered.status_code == 503, answered.text
            assert answered.headers["Retry-After"] == "1"
            assert "reporting-script" in answered.json()["error"]
            # A withdrawal takes the same transaction, bounded the same way.
            with pytest.raises(RowLocked):
                guarded.approvals.withdraw(gate.id, by="user:test")
            # Nothing was written: the gate still waits, and so does the run.
            assert h.approvals.get(gate.id).status == "pending"
            assert h.runs.get(run.run_id).status == "waiting"
        # Let go, the same decision (its same key) goes through, once.
        decided = guarded.approvals.decide(gate.id, "approved", key="k-1", by="user:test")
        assert [d.status for d in decided.decided] == ["approved"]
        assert h.wait(run.run_id).status == "done"
        guarded.close()


def test_a_retry_blocked_by_a_held_row_fails_and_goes_through_once_it_is_let_go(
    postgres_url: str,
) -> None:
    with Harness(make_app(), database_url=postgres_url) as h:
        run = h.start("broken-step", {"sku": "sku-1", "quantity": 1})
        assert h.wait(run.run_id).status == "failed"
        guarded = guarded_client(h, postgres_url, REMIT_LOCK_TIMEOUT="1")
        with held_row(postgres_url, run.run_id):
            with pytest.raises(RowLocked) as refused:
                guarded.runs.retry(run.run_id, by="user:test")
            assert "retry " + run.run_id in str(refused.value)
            assert "reporting-script" in str(refused.value)
            assert (h.runs.get(run.run_id).status, h.runs.get(run.run_id).attempt) == ("failed", 1)
        assert guarded.runs.retry(run.run_id, by="user:test").attempt == 2
        guarded.close()


def test_a_message_blocked_by_a_held_row_fails_keeps_nothing_and_goes_through_once_let_go(
    postgres_url: str,
) -> None:
    def kept(topic: str) -> int:
        engine = sa.create_engine(postgres_url)
        try:
            with engine.connect() as conn:
                query = sa.text("SELECT count(*) FROM remit_messages WHERE topic = :t")
                return int(conn.execute(query, {"t": topic}).scalar_one())
        finally:
            engine.dispose()

    with Harness(make_app(), database_url=postgres_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        h.gate(run.run_id)
        guarded = guarded_client(h, postgres_url, REMIT_LOCK_TIMEOUT="1")
        with held_row(postgres_url, run.run_id):
            began = time.monotonic()
            with pytest.raises(RowLocked) as refused:
                guarded.runs.send(run.run_id, "note", {"n": 1}, key="m-1", by="user:test")
            said = str(refused.value)
            assert f"send to run {run.run_id} on note" in said, said
            assert "reporting-script" in said, said
            assert time.monotonic() - began < 10
            _, token = guarded.services.tokens.create("user:test", by="user:test")
            api = create_api(guarded, allowed_hosts=["testserver"])
            with TestClient(api, headers={"Authorization": f"Bearer {token}"}) as http:
                answered = http.post(
                    f"/runs/{run.run_id}/messages",
                    json={"topic": "note", "payload": {"n": 1}},
                    headers={"Idempotency-Key": "m-2"},
                )
            assert answered.status_code == 503, answered.text
            assert answered.headers["Retry-After"] == "1"
            assert "reporting-script" in answered.json()["error"]
            assert kept("note") == 0
        # Let go, the same send (its same key) goes through, once.
        sent = guarded.runs.send(run.run_id, "note", {"n": 1}, key="m-1", by="user:test")
        again = guarded.runs.send(run.run_id, "note", {"n": 1}, key="m-1", by="user:test")
        assert (sent.seq, again.replayed) == (again.seq, True)
        assert kept("note") == 1
        guarded.close()


def test_a_session_of_remit_left_idle_in_a_transaction_is_ended_and_lets_go(
    postgres_url: str,
) -> None:
    with Harness(make_app(), database_url=postgres_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        gate = h.gate(run.run_id)
        guarded = guarded_client(h, postgres_url, REMIT_IDLE_TRANSACTION_TIMEOUT="1")
        # One of remit's own connections locks the run's row and is then forgotten.
        left = guarded.db.engine.connect()
        left.begin()
        assert lock(left, run.run_id) is not None
        with guarded.db.engine.connect() as conn:
            named = conn.execute(
                sa.text("SELECT application_name FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": left.connection.dbapi_connection.info.backend_pid},  # type: ignore[union-attr]
            ).scalar()
        assert named == "remit"
        time.sleep(2)
        # The server ended the session: the decision does not wait on it.
        began = time.monotonic()
        h.decide(gate.id, "approved")
        assert time.monotonic() - began < 5
        assert h.wait(run.run_id).status == "done"
        with pytest.raises(sa.exc.DBAPIError) as ended:
            left.execute(sa.text("SELECT 1"))
        assert "idle-in-transaction timeout" in str(ended.value).lower()
        left.invalidate()
        guarded.close()


def test_on_sqlite_a_decision_waits_for_another_writer_then_goes_through(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'remit.sqlite'}"
    with Harness(make_app(), database_url=url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        gate = h.gate(run.run_id)
        writer = sqlite3.connect(
            tmp_path / "remit.sqlite", isolation_level=None, check_same_thread=False
        )
        writer.execute("BEGIN IMMEDIATE")
        threading.Timer(1.5, writer.rollback).start()
        began = time.monotonic()
        h.decide(gate.id, "approved")
        assert time.monotonic() - began >= 1.0
        assert h.wait(run.run_id).status == "done"
        writer.close()


def test_remit_worker_creates_the_database_the_url_names_and_says_so(tmp_path: Path) -> None:
    name = f"remit_new_{uuid.uuid4().hex[:10]}"
    url = postgres_admin_url().set(database=name).render_as_string(hide_password=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    env.update(REMIT_DATABASE_URL=url, REMIT_FAKES="1")
    log = tmp_path / "worker.log"
    try:
        with log.open("w") as written:
            worker = subprocess.Popen(
                [sys.executable, "-m", "remit", "--app", str(CRASH_APP), "worker"],
                env=env,
                stdout=written,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 120
            while "serving" not in log.read_text():
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            worker.terminate()
            worker.wait(60)
        lines = [line for line in log.read_text().splitlines() if "created the database" in line]
        shown = url.replace("postgresql+psycopg://", "postgresql://")
        assert lines == [f"created the database {name} at {shown} (it was missing)"], lines
        # Made once: it is there now, and nothing makes it again.
        again = Database(url)
        assert again.create_if_missing() is False
        again.dispose()
    finally:
        drop_postgres_database(url)


def test_processes_starting_at_once_on_a_missing_database_all_go_on() -> None:
    name = f"remit_new_{uuid.uuid4().hex[:10]}"
    url = postgres_admin_url().set(database=name).render_as_string(hide_password=False)
    databases = [Database(url) for _ in range(4)]
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            made = list(pool.map(lambda db: db.create_if_missing(), databases))
        assert sorted(made) == [False, False, False, True]
    finally:
        for db in databases:
            db.dispose()
        drop_postgres_database(url)


def test_a_server_that_refuses_the_user_is_no_missing_database_to_create() -> None:
    url = postgres_admin_url().set(database="postgres", username="no_such_role_here")
    db = Database(url.render_as_string(hide_password=False))
    with pytest.raises(DatabaseError) as refused:
        db.create_if_missing()
    assert "no_such_role_here" in str(refused.value)
    db.dispose()
