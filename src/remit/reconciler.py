"""The reconciler: passes that close the windows a crash leaves between remit's rows and DBOS.

One pass so far, run by every worker at start and then every minute: conclude the runs whose
current attempt has ended in DBOS while the run row still says `queued` or `running` (the
worker died, or the database failed, between the attempt's end and its status write). Its cost
grows with the runs in flight, not with the runs that exist.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from dbos import DBOSClient, WorkflowStatus

from remit.runs import RunStatus, RunStore
from remit.runtime import SUSPENDED

log = logging.getLogger("remit.reconciler")

DEFAULT_INTERVAL = 60.0

# How an ended DBOS workflow concludes its run.
_ENDED: dict[str, RunStatus] = {
    "SUCCESS": "done",
    "ERROR": "failed",
    "CANCELLED": "cancelled",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "failed",
}


@dataclass(frozen=True)
class Action:
    """One run a pass moved, and why."""

    run_id: str
    workflow_id: str
    status: str
    reason: str


def conclusion(dbos_status: WorkflowStatus) -> tuple[RunStatus, Any, str | None] | None:
    """The status, output and error an ended attempt gives its run; None while it runs."""
    status = _ENDED.get(dbos_status.status)
    if status is None:
        return None
    if dbos_status.status == "SUCCESS":
        output = dbos_status.output
        if isinstance(output, dict) and output.get(SUSPENDED) in ("waiting", "sleeping"):
            # The attempt stopped at a gate or a long sleep; its status write did not land.
            return output[SUSPENDED], None, None
        return status, output, None
    if dbos_status.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
        return status, None, "DBOS stopped recovering the attempt after too many recoveries"
    if dbos_status.status == "CANCELLED":
        return status, None, None
    error = dbos_status.error
    return status, None, f"{type(error).__name__}: {error}" if error is not None else "failed"


def conclude_ended(runs: RunStore, client: DBOSClient) -> list[Action]:
    """Conclude every run in flight whose current attempt has ended in DBOS.

    One run's failure is logged and the pass goes on with the others.
    """
    in_flight = runs.in_flight()
    if not in_flight:
        return []
    ended = client.list_workflows(
        workflow_ids=[workflow_id for _, workflow_id in in_flight],
        status=list(_ENDED),
        load_input=False,
    )
    by_id = {status.workflow_id: status for status in ended}
    actions: list[Action] = []
    for run_id, workflow_id in in_flight:
        found = by_id.get(workflow_id)
        decided = None if found is None else conclusion(found)
        if found is None or decided is None:
            continue
        status, output, error = decided
        try:
            if runs.conclude(run_id, workflow_id, status, output=output, error=error):
                action = Action(run_id, workflow_id, status, f"attempt ended {found.status}")
                log.warning("reconciler: run %s concluded %s (%s)", run_id, status, action.reason)
                actions.append(action)
        except Exception:
            log.exception("reconciler: run %s could not be concluded; the pass goes on", run_id)
    return actions


class Reconciler:
    """Runs the passes at start and then every `interval` seconds, on a daemon thread."""

    def __init__(
        self, runs: RunStore, client: DBOSClient, *, interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.runs = runs
        self.client = client
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_pass(self) -> list[Action]:
        try:
            return conclude_ended(self.runs, self.client)
        except Exception:
            log.exception("reconciler: the pass failed; the next one runs in %.0fs", self.interval)
            return []

    def start(self) -> None:
        self.run_pass()
        self._thread = threading.Thread(target=self._loop, name="remit-reconciler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_pass()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
