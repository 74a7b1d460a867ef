"""Changes and deploys as the database keeps them (`remit_changes`, `remit_deploys`).

The change run writes its row as it goes, each write in a step of its own; `remit changes`,
`GET /changes` and the console read them. Each thing a change run does is also one activity
row of the record `change/<id>`, written once however often its step runs.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.activity import RecordRef, activity_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.fence import FINISHED
from remit.core.schema import activity, changes, deploys, runs
from remit.people.answers import as_json

RECORD_TYPE = "change"


@dataclass(frozen=True)
class Change:
    """One change: a branch of the repo moving through checks, review, merge and deploy in the
    run `run_id`. `status` is where it stands; `run_status` the run's own."""

    id: str
    app: str
    remote: str
    branch: str
    base: str
    run_id: str
    author: str
    title: str
    number: int | None
    url: str | None
    head: str | None
    status: str
    checks: dict[str, Any] | None
    merge_commit: str | None
    deployed: str | None
    created_at: datetime
    updated_at: datetime
    run_status: str | None = None

    def as_json(self) -> dict[str, Any]:
        return as_json({f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Deploy:
    """What one host was deployed with, and whether it was healthy after."""

    id: int
    app: str
    host: str
    revision: str
    kind: str
    change_id: str | None
    run_id: str
    healthy: bool
    detail: str
    at: datetime

    def as_json(self) -> dict[str, Any]:
        return as_json({f.name: getattr(self, f.name) for f in fields(self)})


class Changes:
    """The changes of one app, and its hosts' deploys."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def _select(self) -> sa.Select[Any]:
        return (
            sa.select(changes, runs.c.status.label("run_status"))
            .outerjoin(runs, runs.c.run_id == changes.c.run_id)
            .where(changes.c.app == self.app)
        )

    def get(self, change_id: str) -> Change | None:
        row = self.db.read(
            f"change {change_id}",
            lambda conn: conn.execute(self._select().where(changes.c.id == change_id)).first(),
        )
        return None if row is None else _change(row)

    def of_run(self, run_id: str) -> Change | None:
        row = self.db.read(
            f"the change of run {run_id}",
            lambda conn: conn.execute(self._select().where(changes.c.run_id == run_id)).first(),
        )
        return None if row is None else _change(row)

    def list(self, *, limit: int = 50, branch: str | None = None) -> list[Change]:
        """The newest changes first, of `branch` only when given."""
        query = self._select().order_by(changes.c.created_at.desc(), changes.c.id.desc())
        if branch is not None:
            query = query.where(changes.c.branch == branch)
        rows = self.db.read("changes", lambda conn: conn.execute(query.limit(limit)).all())
        return [_change(row) for row in rows]

    def going(self, *, branch: str | None = None, number: int | None = None) -> Change | None:
        """The change of `branch` (or of the forge's change request `number`) whose run has
        not finished, if there is one."""
        query = self._select().where(runs.c.status.not_in(FINISHED))
        if branch is not None:
            query = query.where(changes.c.branch == branch)
        if number is not None:
            query = query.where(changes.c.number == number)
        row = self.db.read(
            "the change going",
            lambda conn: conn.execute(
                query.order_by(changes.c.created_at.desc(), changes.c.id.desc())
            ).first(),
        )
        return None if row is None else _change(row)

    def merging(self) -> Change | None:
        """A change going that is merging, or deploying what it merged, if there is one."""
        query = self._select().where(
            runs.c.status.not_in(FINISHED),
            changes.c.status.in_(("merging", "merged", "deploying")),
        )
        row = self.db.read("a change merging", lambda conn: conn.execute(query).first())
        return None if row is None else _change(row)

    def merged_by_a_change(self, commit: str) -> str | None:
        """The change whose merge made `commit`, if one did."""
        return self.db.read(
            f"the change that merged {commit}",
            lambda conn: conn.execute(
                sa.select(changes.c.id).where(
                    changes.c.app == self.app, changes.c.merge_commit == commit
                )
            ).scalar(),
        )

    def write(self, change_id: str, **values: Any) -> None:
        """Insert the change's row, or update it with `values` (a step's write: the same values
        written again change nothing). The run and the process that opened it may both write
        it first: the one whose insert finds the row there updates it instead."""
        now = self.clock.now()
        update = changes.update().where(changes.c.id == change_id).values(updated_at=now, **values)
        with self.db.begin() as conn:
            found = conn.execute(sa.select(changes.c.id).where(changes.c.id == change_id)).first()
            if found is not None:
                conn.execute(update)
                return
        try:
            with self.db.begin() as conn:
                conn.execute(
                    changes.insert().values(
                        id=change_id, app=self.app, created_at=now, updated_at=now, **values
                    )
                )
        except sa.exc.IntegrityError:
            with self.db.begin() as conn:
                conn.execute(update)

    def note(
        self,
        change_id: str,
        *,
        kind: str,
        summary: str,
        actor: str,
        run_id: str,
        target: str,
        meta: dict[str, Any] | None = None,
        **values: Any,
    ) -> None:
        """One activity row of the record `change/<change_id>`, written once per `target`
        (a step that runs again finds it there), with the change's row updated by `values`
        in the same transaction."""
        ref = RecordRef(self.app, RECORD_TYPE, change_id)
        now = self.clock.now()
        with self.db.begin() as conn:
            if values:
                conn.execute(
                    changes.update()
                    .where(changes.c.id == change_id)
                    .values(updated_at=now, **values)
                )
            written = conn.execute(
                sa.select(activity.c.id).where(
                    activity.c.app == self.app,
                    activity.c.record_type == RECORD_TYPE,
                    activity.c.record_id == change_id,
                    activity.c.kind == kind,
                    activity.c.target == target,
                )
            ).first()
            if written is None:
                activity_row(
                    conn,
                    ref,
                    at=now,
                    kind=kind,
                    actor=actor,
                    summary=summary,
                    run_id=run_id,
                    target=target,
                    meta=meta,
                )

    def deployed(
        self,
        *,
        host: str,
        revision: str,
        kind: str,
        change_id: str | None,
        run_id: str,
        healthy: bool,
        detail: str,
    ) -> None:
        """Record what `host` runs now, once per run, host, kind and revision."""
        with self.db.begin() as conn:
            found = conn.execute(
                sa.select(deploys.c.id).where(
                    deploys.c.app == self.app,
                    deploys.c.host == host,
                    deploys.c.run_id == run_id,
                    deploys.c.kind == kind,
                    deploys.c.revision == revision,
                )
            ).first()
            if found is None:
                conn.execute(
                    deploys.insert().values(
                        app=self.app,
                        host=host,
                        revision=revision,
                        kind=kind,
                        change_id=change_id,
                        run_id=run_id,
                        healthy=healthy,
                        detail=detail,
                        at=self.clock.now(),
                    )
                )

    def deploys(
        self, *, host: str | None = None, change_id: str | None = None, limit: int = 50
    ) -> builtins.list[Deploy]:
        """The hosts' deploys, newest first (of `host`, or by the change `change_id`, only)."""
        query = sa.select(deploys).where(deploys.c.app == self.app)
        if host is not None:
            query = query.where(deploys.c.host == host)
        if change_id is not None:
            query = query.where(deploys.c.change_id == change_id)
        query = query.order_by(deploys.c.id.desc()).limit(limit)
        rows = self.db.read("deploys", lambda conn: conn.execute(query).all())
        return [Deploy(**dict(row._mapping)) for row in rows]


def _change(row: sa.Row[Any]) -> Change:
    values = dict(row._mapping)
    return Change(**values)
