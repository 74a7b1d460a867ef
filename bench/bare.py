"""Bare DBOS, for comparison: a 3-step workflow doing what the benchmark app's 3-op workflow does,
configured as a remit worker configures DBOS (JSON serialization, bounded threads, own executor
id and version), without remit's runs, ledger and fences.

    python bench/bare.py worker DATABASE_URL   # serve the `bare` queue until SIGTERM
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig

from remit.core.database import Database, portable_serializer

APP = "bench-bare"
QUEUE = "bare"
WORKFLOW = "bare-bump"
_items: dict[str, int] = {}


def register() -> None:
    """Register the bare workflow with the DBOS instance being set up (before launch)."""

    def get(item: str) -> dict[str, Any]:
        return {"item": item, "count": _items.get(item, 0)}

    def put(item: str, count: int) -> dict[str, Any]:
        _items[item] = count
        return {"item": item, "count": count}

    @DBOS.workflow(name=WORKFLOW)
    def bare_bump(item: str) -> int:
        before = DBOS.run_step({"name": "get"}, get, item)
        DBOS.run_step({"name": "put"}, put, item, before["count"] + 1)
        after: dict[str, Any] = DBOS.run_step({"name": "get"}, get, item)
        return int(after["count"])


def register_queue(
    client: DBOSClient, *, poll: float, worker_concurrency: int, name: str = QUEUE
) -> None:
    client.register_queue(
        name,
        worker_concurrency=worker_concurrency,
        polling_interval_sec=poll,
        on_conflict="always_update",
    )


def client(db: Database, app_name: str = APP) -> DBOSClient:
    """A client of the DBOS application `app_name` (DBOS serves only its own app's queues)."""
    return DBOSClient(
        system_database_url=db.dbos_url, serializer=portable_serializer(), application_name=app_name
    )


def serve(
    url: str,
    *,
    poll: float = 0.1,
    threads: int = 64,
    worker_concurrency: int = 16,
    app: str = APP,
    queues: Sequence[str] = (QUEUE,),
    workflows: Callable[[], None] = register,
    notification_poll: float | None = None,
) -> None:
    """Serve `queues` of the DBOS application `app`, with the workflows `workflows` registers,
    until SIGTERM. `notification_poll` is how often DBOS's notification listener polls on
    SQLite (`recv` waits on it; None: DBOS's default, 1 s), which a remit worker sets to its
    poll interval."""
    db = Database(url)
    db.prepare()
    queue_client = client(db, app)
    for queue in queues:
        register_queue(queue_client, poll=poll, worker_concurrency=worker_concurrency, name=queue)
    config: DBOSConfig = {
        "name": app,
        "system_database_url": db.dbos_url,
        "application_version": "bare",
        "executor_id": "bare-worker",
        "serializer": portable_serializer(),
        "max_executor_threads": threads,
        "sys_db_pool_size": 16,
        "run_migrations": False,
        "log_level": "WARNING",
    }
    if notification_poll is not None:
        config["notification_listener_polling_interval_sec"] = notification_poll
    engine = db.dbos_engine(pool_size=16)
    if engine is not None:
        config["system_database_engine"] = engine
    DBOS(config=config)
    workflows()
    DBOS.launch()
    print("serving", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    queue_client.destroy()
    DBOS.destroy(destroy_registry=True)


if __name__ == "__main__":
    serve(sys.argv[2])
