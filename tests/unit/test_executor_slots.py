"""A worker's executor id when none is set: the lowest free slot of its app on its host. Two
apps' workers on one database never share one (DBOS's recovery at launch and the workers table
key by it); two workers of one app take two slots, and a slot given up is taken again."""

from __future__ import annotations

import socket
import uuid

from remit.serve.worker import ExecutorSlot


def test_two_apps_on_one_database_take_distinct_ids_and_one_app_takes_the_lowest_free() -> None:
    database = f"sqlite:////tmp/{uuid.uuid4().hex}.sqlite"  # a scope of its own, never opened
    host = socket.gethostname().split(".")[0] or "host"
    ops, other, second = (
        ExecutorSlot(database, app) for app in ("ops-repo", "other-repo", "ops-repo")
    )
    try:
        assert ops.acquire() == f"{host}-ops-repo-0"
        assert other.acquire() == f"{host}-other-repo-0"
        assert second.acquire() == f"{host}-ops-repo-1"
        ops.release()
        again = ExecutorSlot(database, "ops-repo")
        assert again.acquire() == f"{host}-ops-repo-0"  # a restarted worker gets its id back
        again.release()
    finally:
        for slot in (ops, other, second):
            slot.release()
