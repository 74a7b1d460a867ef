"""The audit trail: who did what to an approval or a task, and when (`remit_audit`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.schema import audit


def audit_of(db: Database, target: str) -> list[dict[str, Any]]:
    """The audit rows about `target` (an approval's id, a task's), oldest first."""
    with db.engine.connect() as conn:
        rows = conn.execute(sa.select(audit).where(audit.c.target == target).order_by(audit.c.id))
        return [dict(row._mapping) for row in rows]
