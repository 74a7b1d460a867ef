"""remit's own tables. They live beside DBOS's in the same database, so one transaction can write
a run row and enqueue its DBOS workflow together."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

# Bump when a table changes. A database stamped with another number is prepared again; a
# change to an existing table needs its own migration step in `Database.prepare`.
SCHEMA_VERSION = "2"


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on both databases (SQLite keeps no zone of its own)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("remit stores only timezone-aware timestamps")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = sa.MetaData()

meta = sa.Table(
    "remit_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(200), nullable=False),
)

runs = sa.Table(
    "remit_runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("workflow", sa.String(200), nullable=False),
    sa.Column("queue", sa.String(200), nullable=False),
    sa.Column("input", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    # The current attempt's DBOS workflow id, `<run_id>:<attempt>`: the fence of every status write.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("version", sa.String(64)),
    sa.Column("started_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime),
    sa.Column("output", sa.JSON),
    sa.Column("error", sa.Text),
    sa.Index("remit_runs_status", "status", "created_at"),
    sa.Index("remit_runs_created", "created_at"),
)

ledger = sa.Table(
    "remit_ledger",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("step_id", sa.Integer, nullable=False),
    sa.Column("op_id", sa.String(200), nullable=False),
    sa.Column("effect", sa.String(8), nullable=False),
    sa.Column("idempotent", sa.Boolean, nullable=False),
    sa.Column("idempotency_key", sa.String(300), nullable=False, unique=True),
    sa.Column("input_hash", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("finished_at", UTCDateTime),
    sa.Column("output", sa.JSON),
    sa.Column("error", sa.Text),
    # kind, retryable, status and vendor_code of a failure, so a replay raises the same error.
    sa.Column("error_info", sa.JSON),
    sa.Column("cost", sa.Numeric(18, 6)),
    sa.Index("remit_ledger_run", "run_id", "id"),
)

workers = sa.Table(
    "remit_workers",
    metadata,
    sa.Column("executor_id", sa.String(200), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("version", sa.String(64), nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    # Set when the worker stopped on its own (SIGTERM): it is gone, not dead.
    sa.Column("stopped_at", UTCDateTime),
    # The live worker that took over this one's unfinished attempts, and when.
    sa.Column("taken_over_by", sa.String(200)),
    sa.Column("taken_over_at", UTCDateTime),
)
