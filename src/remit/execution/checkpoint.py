"""Writes that commit with a step's own transactions.

DBOS runs a step in two transactions of its own: one checks that the step has no checkpoint
yet (else it replays), the other records the checkpoint once the step has run. An op call's
`started` row rides in the first, and its ledger outcome in the second, so a call costs no
commit of its own and the ledger and the checkpoints cannot disagree: a checkpoint's call is
never left showing in flight, a call's `started` row exists only for a step that runs, and a
settled row exists only for a step that will not run again.

DBOS has no public way to add a write to those transactions. remit wraps the two functions of
its system database that run inside them (`_check_operation_execution_txn` and
`_record_operation_result_txn`, each given the connection of the transaction that commits
it), once per DBOS instance. A write waits in `Checkpoint` for as long as its step runs; the
check's runs only when the step has no checkpoint (it will run), after DBOS's reads, and the
record's after DBOS's insert, whose owner check has passed by then. When the wrappers cannot be
put in place, there is no `Checkpoint` and the caller writes on its own; a write the step's
transactions did not take is left to the caller too (`Checkpoint.pending`, `took_begin`).

A write given here runs while DBOS's transaction is open (on SQLite, holding the write lock):
it uses the connection it is given and nothing else. A read on another connection (remit's
engine, a stored secret) would wait for a pooled connection held by threads waiting for that
lock; do such reads before the step, as `calls.py` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

log = logging.getLogger("remit.calls")

# What DBOS's system database names the functions that check for a step's row, and insert it.
_CHECK = "_check_operation_execution_txn"
_RECORD = "_record_operation_result_txn"
# Set on a system database whose `_RECORD` is wrapped.
_WRAPPED = "_remit_checkpoint_writes"

# The writes waiting for their step's checkpoint, by (DBOS workflow id, step id).
_waiting: dict[tuple[str, int], Checkpoint] = {}
_lock = threading.Lock()


class Checkpoint:
    """The checkpoint of one step of one attempt: what is written with it."""

    def __init__(self, workflow_id: str, step_id: int) -> None:
        self.key = (workflow_id, step_id)
        self._begin: Callable[[sa.Connection], Any] | None = None
        self._begun: list[Any] = []
        self._write: Callable[[sa.Connection], None] | None = None
        # Whether the write went into a transaction of the checkpoint (its commit is known only
        # once the step has returned).
        self.written = False

    @classmethod
    def of(cls, workflow_id: str, step_id: int) -> Checkpoint | None:
        """The step's checkpoint, or None when DBOS cannot take a write into it (no DBOS is
        launched here, or its system database is not the one remit knows)."""
        return cls(workflow_id, step_id) if _wrapped() else None

    def begin(self, write: Callable[[sa.Connection], Any]) -> None:
        """Run `write(conn)` in the transaction that finds the step has no checkpoint yet (it is
        about to run); `took_begin` gives its answer, once. Given before the step runs."""
        self._begin = write
        with _lock:
            _waiting[self.key] = self

    def took_begin(self) -> tuple[bool, Any]:
        """(True, the answer of the write given to `begin`) the first time after the check's
        transaction ran it; (False, None) otherwise, and ever after: a step DBOS runs again
        begins again on its own."""
        if not self._begun:
            return False, None
        return True, self._begun.pop()

    def add(self, write: Callable[[sa.Connection], None]) -> None:
        """Write `write(conn)` in the transaction that records this step, replacing any write
        given before (a retry of the step settles again)."""
        self._write = write
        self.written = False
        with _lock:
            _waiting[self.key] = self

    def pending(self) -> Callable[[sa.Connection], None] | None:
        """The write given, once the step has returned without its checkpoint taking it."""
        return None if self.written else self._write

    def close(self) -> None:
        with _lock:
            if _waiting.get(self.key) is self:
                del _waiting[self.key]

    def _run_begin(self, conn: sa.Connection) -> None:
        if self._begin is not None:
            # A check whose commit failed runs again: its answer replaces the one before.
            self._begun[:] = [self._begin(conn)]

    def _run(self, conn: sa.Connection) -> None:
        if self._write is not None:
            self._write(conn)
            self.written = True


def _wrapped() -> bool:
    """Put the wrapper on the running DBOS's system database, once; whether it is there."""
    from dbos._dbos import _get_dbos_instance

    try:
        sys_db = _get_dbos_instance()._sys_db
    except Exception:  # no DBOS launched in this process: nothing records steps
        return False
    if getattr(sys_db, _WRAPPED, False):
        return True
    with _lock:
        if getattr(sys_db, _WRAPPED, False):
            return True
        check, record = getattr(sys_db, _CHECK, None), getattr(sys_db, _RECORD, None)
        if check is None or record is None:
            log.warning(
                "this DBOS has no %s or %s: op calls write the ledger in transactions of their own",
                _CHECK,
                _RECORD,
            )
            return False

        def checking(workflow_id: str, function_id: int, *args: Any, **kwargs: Any) -> Any:
            recorded = check(workflow_id, function_id, *args, **kwargs)
            waiting = _find(workflow_id, function_id)
            conn = _connection(args, kwargs, at=1)
            if recorded is None and waiting is not None and conn is not None:
                waiting._run_begin(conn)
            return recorded

        def recording(result: Any, *args: Any, **kwargs: Any) -> None:
            record(result, *args, **kwargs)
            waiting = _find(result["workflow_uuid"], result["function_id"])
            conn = _connection(args, kwargs, at=1)
            if waiting is not None and conn is not None:
                waiting._run(conn)

        setattr(sys_db, _CHECK, checking)
        setattr(sys_db, _RECORD, recording)
        setattr(sys_db, _WRAPPED, True)
    return True


def _find(workflow_id: str, step_id: int) -> Checkpoint | None:
    with _lock:
        return _waiting.get((workflow_id, step_id))


def _connection(args: tuple[Any, ...], kwargs: dict[str, Any], *, at: int) -> sa.Connection | None:
    """The connection DBOS passed, as `conn=` or as the positional argument `at` (counted
    after the step's identity); None for anything else (the caller then writes on its own)."""
    conn = kwargs.get("conn", args[at] if len(args) > at else None)
    return conn if isinstance(conn, sa.Connection) else None
