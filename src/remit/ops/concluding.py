"""A reconciler pass's report, and its first part: concluding each run in flight whose current
attempt has ended in DBOS (a worker that died between the attempt's end and its status write
leaves one), as the attempt's end says, behind the run's fence.

On Postgres the runs of a pass are concluded together, up to 500 a statement; a run that
concerns a record (its end writes an activity row too), every run on SQLite, and any chunk
whose statement fails go one by one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from remit.budgets.model import Drift
from remit.core.activity import RUN_STARTED
from remit.core.ledger import LedgerStore
from remit.core.runs import FINISHED, RunStatus, RunStore
from remit.core.schema import activity, runs
from remit.ops.recoveries import where_it_stopped
from remit.ops.runtime import SUSPENDED

if TYPE_CHECKING:
    from dbos import DBOSClient, WorkflowStatus


log = logging.getLogger("remit.reconciler")

# How an ended DBOS workflow concludes its run.
_ENDED: dict[str, RunStatus] = {
    "SUCCESS": "done",
    "ERROR": "failed",
    "CANCELLED": "cancelled",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "failed",
}


@dataclass(frozen=True)
class Action:
    """One thing a pass did (or, in a dry run, would do) to one run, and why."""

    run_id: str
    workflow_id: str
    status: str
    reason: str
    kind: str = "conclude"


@dataclass
class Report:
    """What one pass did, pass by pass, and what it could not do."""

    dry_run: bool = False
    actions: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Budget periods whose counter is not their ledger's sum: reported, never corrected.
    drift: list[Drift] = field(default_factory=list)


def conclusion(
    dbos_status: WorkflowStatus, dying_in: str = "an unknown step"
) -> tuple[RunStatus, Any, str | None] | None:
    """The status, output and error an ended attempt gives its run; None while it runs.
    `dying_in` names the step an attempt DBOS stopped recovering was in."""
    status = _ENDED.get(dbos_status.status)
    if status is None:
        return None
    if dbos_status.status == "SUCCESS":
        output = dbos_status.output
        if isinstance(output, dict) and output.get(SUSPENDED) in ("waiting", "sleeping", "paused"):
            # The attempt stopped at a gate, a long sleep or a pause; its status write did not
            # land.
            return output[SUSPENDED], None, None
        return status, output, None
    if dbos_status.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
        return (
            status,
            None,
            f"attempt {dbos_status.workflow_id} was recovered too many times "
            f"(REMIT_MAX_RECOVERIES): each time, its worker stopped before the attempt got past "
            f"{dying_in}. Find why that step ends its process (memory, a crash in native code, "
            "a kill, or a shutdown whose drain it outlasts), then retry the run",
        )
    if dbos_status.status == "CANCELLED":
        return status, None, None
    error = dbos_status.error
    return status, None, f"{type(error).__name__}: {error}" if error is not None else "failed"


def conclude_ended(runs_store: RunStore, client: DBOSClient) -> list[Action]:
    """Pass 1 alone: conclude every run in flight whose current attempt has ended in DBOS."""
    in_flight = runs_store.in_flight()
    found = attempts_of(client, [workflow_id for _, workflow_id in in_flight])
    report = Report()
    dying = DyingIn(LedgerStore(runs_store.db, clock=runs_store.clock), client)
    conclude(runs_store, in_flight, found, report, apply=True, dying_in=dying)
    return report.actions


class DyingIn:
    """Names the step an attempt was in when its worker died: the call its ledger holds in
    flight, or else the position after its last finished step."""

    def __init__(self, ledger_store: LedgerStore, client: DBOSClient) -> None:
        self.ledger = ledger_store
        self.client = client

    def __call__(self, run_id: str, workflow_id: str) -> str:
        return where_it_stopped(
            workflow_id,
            self.ledger.list(run_id=run_id),
            list(self.client.list_workflow_steps(workflow_id)),
        )


# Ids asked of DBOS at once: past a few hundred, Postgres reads DBOS's tables whole instead of
# through their index.
_CHUNK = 250


# Runs concluded in one statement at most: it holds their rows' locks until it ends.
_TOGETHER = 500


def attempts_of(client: DBOSClient, workflow_ids: list[str]) -> dict[str, WorkflowStatus]:
    found: dict[str, WorkflowStatus] = {}
    for start in range(0, len(workflow_ids), _CHUNK):
        chunk = workflow_ids[start : start + _CHUNK]
        for status in client.list_workflows(workflow_ids=chunk, load_input=False):
            found[status.workflow_id] = status
    return found


@dataclass(frozen=True)
class Ended:
    """A run whose current attempt has ended in DBOS, and what that attempt concludes it."""

    run_id: str
    workflow_id: str
    status: RunStatus
    output: Any
    error: str | None
    reason: str


def conclude(
    runs_store: RunStore,
    in_flight: list[tuple[str, str]],
    found: dict[str, WorkflowStatus],
    report: Report,
    *,
    apply: bool,
    dying_in: Callable[[str, str], str],
) -> None:
    ended: list[Ended] = []
    for run_id, workflow_id in in_flight:
        attempt = found.get(workflow_id)
        if attempt is None:
            continue
        dying = (
            dying_in(run_id, workflow_id)
            if attempt.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED"
            else "an unknown step"
        )
        decided = conclusion(attempt, dying)
        if attempt is None or decided is None:
            continue
        status, output, error = decided
        reason = f"attempt ended {attempt.status}"
        if not apply:
            report.actions.append(Action(run_id, workflow_id, status, reason))
            continue
        ended.append(Ended(run_id, workflow_id, status, output, error, reason))
    if not ended:
        return
    together = conclude_together(runs_store, ended)
    for one in ended:
        written = together.get(one.run_id)
        if written is None:
            # Concluded on its own, as `RunStore.conclude` does it (with its record's activity).
            try:
                written = runs_store.conclude(
                    one.run_id, one.workflow_id, one.status, output=one.output, error=one.error
                )
            except Exception as error:
                log.exception(
                    "reconciler: run %s could not be concluded; the pass goes on", one.run_id
                )
                report.errors.append(f"run {one.run_id}: conclude: {type(error).__name__}: {error}")
                continue
        elif not written:
            log.info(
                "status write refused: run %s has moved on from attempt %s (wanted %s)",
                one.run_id,
                one.workflow_id,
                one.status,
            )
        if written:
            log.warning("reconciler: run %s concluded %s (%s)", one.run_id, one.status, one.reason)
            report.actions.append(Action(one.run_id, one.workflow_id, one.status, one.reason))


def conclude_together(runs_store: RunStore, ended: list[Ended]) -> dict[str, bool]:
    """Conclude on Postgres, in one statement for up to `_TOGETHER` of them, the runs in `ended`
    that concern no record, and say of each whether its write landed (False: the fence refused
    it). The runs left out (those that concern a record, whose end writes an activity row with
    it; all of them on SQLite, which has no round trips to save; those of a statement that
    failed) are for `RunStore.conclude`, one by one.

    Each run's write is the one `RunStore.conclude` makes: the same values, behind the same
    fence (the run still on the attempt that ended, still `queued` or `running`), so it is safe
    to repeat and a run that moved on meanwhile is left as it is. Two round trips (their
    records, their writes) conclude them all, where two each took most of a pass."""
    db = runs_store.db
    if db.is_sqlite:
        return {}
    written: dict[str, bool] = {}
    for start in range(0, len(ended), _TOGETHER):
        chunk = ended[start : start + _TOGETHER]
        try:
            written.update(
                db.retrying(
                    f"reconciler: conclude {len(chunk)} runs",
                    functools.partial(_write_together, runs_store, chunk),
                )
            )
        except Exception:
            log.exception(
                "reconciler: %d runs could not be concluded together; each is concluded on its own",
                len(chunk),
            )
    return written


# The runs `_write_together` concludes, as a table made of one array per column (their ids,
# their ended attempts' ids, and the status, output and error those concluded them): `unnest`
# of several arrays is Postgres's. One statement of one shape however many runs, compiled once.
_CONCLUSIONS = (
    sa.func.unnest(
        sa.bindparam("run_ids", type_=ARRAY(runs.c.run_id.type)),
        sa.bindparam("workflow_ids", type_=ARRAY(runs.c.workflow_id.type)),
        sa.bindparam("statuses", type_=ARRAY(runs.c.status.type)),
        sa.bindparam("outputs", type_=ARRAY(runs.c.output.type)),
        sa.bindparam("errors", type_=ARRAY(runs.c.error.type)),
    )
    .table_valued("run_id", "workflow_id", "status", "output", "error")
    .render_derived(name="ended")
)
_NOW = sa.bindparam("now", type_=runs.c.updated_at.type)
# `RunStore.conclude`'s fenced status write (`fence.status_write`), for every run at once.
_CONCLUDE = (
    runs.update()
    .where(
        runs.c.run_id == _CONCLUSIONS.c.run_id,
        runs.c.workflow_id == _CONCLUSIONS.c.workflow_id,
        runs.c.status.in_(("queued", "running")),
    )
    .values(
        status=_CONCLUSIONS.c.status,
        output=_CONCLUSIONS.c.output,
        error=_CONCLUSIONS.c.error,
        # A run that waits, sleeps or parks has not finished.
        finished_at=sa.case(
            (_CONCLUSIONS.c.status.in_(tuple(FINISHED)), _NOW), else_=runs.c.finished_at
        ),
        updated_at=_NOW,
    )
    .returning(runs.c.run_id)
)


def _write_together(runs_store: RunStore, chunk: list[Ended]) -> dict[str, bool]:
    with runs_store.db.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        # Written with its start, so read here before the write, as `RunStore.conclude` does.
        recorded = set(
            conn.execute(
                sa.select(activity.c.run_id).where(
                    activity.c.run_id.in_([one.run_id for one in chunk]),
                    activity.c.kind == RUN_STARTED,
                )
            ).scalars()
        )
        plain = [one for one in chunk if one.run_id not in recorded]
        if not plain:
            return {}
        landed = set(
            conn.execute(
                _CONCLUDE,
                {
                    "run_ids": [one.run_id for one in plain],
                    "workflow_ids": [one.workflow_id for one in plain],
                    "statuses": [one.status for one in plain],
                    "outputs": [one.output for one in plain],
                    "errors": [one.error for one in plain],
                    "now": runs_store.clock.now(),
                },
            ).scalars()
        )
        conn.commit()
    return {one.run_id: one.run_id in landed for one in plain}
