"""The audit trail: who did what to an approval, a task, a run or a budget, and when
(`remit_audit`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.schema import audit


def audit_of(db: Database, target: str) -> list[dict[str, Any]]:
    """The audit rows about `target` (an approval's id, a task's), oldest first."""
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(audit).where(audit.c.target == target).order_by(audit.c.id))
        return [dict(row._mapping) for row in rows]


def audit_row(
    conn: sa.Connection,
    *,
    at: datetime,
    actor: str,
    action: str,
    target: str,
    meta: Mapping[str, Any],
) -> None:
    """Write one audit row (who did what to what) in the caller's transaction, the one that
    did it."""
    conn.execute(
        _INSERT, {"at": at, "actor": actor, "action": action, "target": target, "meta": dict(meta)}
    )


# `audit_row`'s statement, built once (its columns are the parameters'): every start writes one.
_INSERT = audit.insert()
