"""remit's own tables. They live beside DBOS's in the same database, so one transaction can write
a run row and enqueue its DBOS workflow together."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

# Bump when a table changes. A database stamped with another number is prepared again; a
# change to an existing table needs its own migration step in `Database.prepare`.
SCHEMA_VERSION = "25"


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
    # The console's filters (`RunStore.list`): a workflow or a starter with few runs among many
    # is found by its index, not by reading every run newest first.
    sa.Index("remit_runs_workflow", "workflow", "created_at"),
    sa.Index("remit_runs_started_by", "started_by", "created_at"),
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

# Partial indexes, made by `Database.prepare` after the tables. They are written as DDL, which
# Postgres and SQLite read alike: an `sa.Index(..., postgresql_where=..., sqlite_where=...)`
# would import both of SQLAlchemy's dialects with this module, a tenth of the command line's
# start.
PARTIAL_INDEXES = (
    # The few calls still `started`: what the reconciler looks for, without reading the rest.
    "CREATE INDEX IF NOT EXISTS remit_ledger_started ON remit_ledger (run_id) "
    "WHERE status = 'started'",
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

approvals = sa.Table(
    "remit_approvals",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("type", sa.String(100), nullable=False),
    sa.Column("title", sa.String(500), nullable=False),
    sa.Column("draft", sa.JSON, nullable=False),
    # The draft as decided, when the decider edited it: what the type's model parsed.
    sa.Column("edited_draft", sa.JSON),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("assignee", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime),
    # The attempt that stopped at the gate and the gate's DBOS step: where the next attempt
    # is forked from, so that the steps before the gate are copied, not run again.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("step_id", sa.Integer, nullable=False),
    sa.Column("decided_by", sa.String(200)),
    sa.Column("decided_via", sa.String(50)),
    sa.Column("decided_at", UTCDateTime),
    sa.Column("decision_key", sa.String(200)),
    sa.Column("batch_id", sa.String(64)),
    sa.Column("reason", sa.Text),
    # The attempt the decision resumed the run on (None when no attempt was waiting on it).
    sa.Column("resumed_workflow_id", sa.String(128)),
    sa.UniqueConstraint("run_id", "key", name="remit_approvals_run_key"),
    sa.Index("remit_approvals_status", "status", "expires_at"),
    sa.Index("remit_approvals_created", "created_at"),
)

# One row per `decide()` call that wrote something: a repeated decision key reads it back.
decisions = sa.Table(
    "remit_decisions",
    metadata,
    sa.Column("decision_key", sa.String(200), primary_key=True),
    sa.Column("approval_ids", sa.JSON, nullable=False),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("decided_by", sa.String(200), nullable=False),
    sa.Column("via", sa.String(50), nullable=False),
    sa.Column("batch_id", sa.String(64)),
    sa.Column("decided_at", UTCDateTime, nullable=False),
)

# The request each key a person sent was first sent with (see `core/keys.py`): a key sent again
# with another request is refused.
request_keys = sa.Table(
    "remit_request_keys",
    metadata,
    sa.Column("scope", sa.String(20), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("summary", sa.String(500), nullable=False),
    sa.Column("first_at", UTCDateTime, nullable=False),
)

# API tokens (see `policy/tokens.py`): only each token's SHA-256 is kept, never the token.
tokens = sa.Table(
    "remit_tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("principal", sa.String(200), nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("expires_at", UTCDateTime),
    sa.Column("revoked_at", UTCDateTime),
    sa.Column("revoked_by", sa.String(200)),
)

# The web console's sign-ins (see `policy/signin.py`): one-time links, sessions and passwords.
# As with tokens, only a hash of each link's code and each session's token is kept.
login_links = sa.Table(
    "remit_login_links",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("principal", sa.String(200), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("used_at", UTCDateTime),
)

sessions = sa.Table(
    "remit_sessions",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("principal", sa.String(200), nullable=False),
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    # How its person signed in: `link` or `password`.
    sa.Column("via", sa.String(16), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("ended_at", UTCDateTime),
)

# A console password per principal, as its argon2id hash (with its own salt and parameters).
passwords = sa.Table(
    "remit_passwords",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("principal", sa.String(200), primary_key=True),
    sa.Column("hash", sa.String(200), nullable=False),
    sa.Column("set_at", UTCDateTime, nullable=False),
    sa.Column("set_by", sa.String(200), nullable=False),
    # Read by no version since wrong passwords are counted by address (`signin_failures`); kept
    # so that a database an earlier version made needs no change.
    sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("locked_until", UTCDateTime, nullable=True),
)

# Wrong passwords by the address they came from: for one principal (`principal`), and for every
# principal at once (`principal` ""), each locking sign-in by password from that address only
# (`policy/signin.py`), so that guessing from one place cannot lock a person out of another.
signin_failures = sa.Table(
    "remit_signin_failures",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("principal", sa.String(200), primary_key=True),
    sa.Column("address", sa.String(100), primary_key=True),
    # Wrong passwords in a row (for a principal: since its last right one from this address),
    # the latest one's time, and until when sign-in by password from here is refused.
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("last_at", UTCDateTime, nullable=False),
    sa.Column("locked_until", UTCDateTime, nullable=True),
)

audit = sa.Table(
    "remit_audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("action", sa.String(100), nullable=False),
    sa.Column("target", sa.String(200), nullable=False),
    sa.Column("meta", sa.JSON, nullable=False),
    sa.Index("remit_audit_target", "target", "id"),
)

# The outbox of attempts to fork: written in the transaction that moves a run to its next
# attempt, deleted once DBOS holds that attempt. A row left behind (the process died between
# the commit and the fork) is completed by any worker's sweep.
resumes = sa.Table(
    "remit_resumes",
    metadata,
    sa.Column("workflow_id", sa.String(128), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("from_workflow_id", sa.String(128), nullable=False),
    sa.Column("from_step", sa.Integer, nullable=False),
    sa.Column("queue", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

# One row per approval and notifier: retried until `sent_at` is set.
notifications = sa.Table(
    "remit_notifications",
    metadata,
    sa.Column("approval_id", sa.String(32), primary_key=True),
    sa.Column("channel", sa.String(50), primary_key=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    # When it may next be tried; a sender holds it by moving this past its own try.
    sa.Column("next_at", UTCDateTime, nullable=False),
    sa.Column("sent_at", UTCDateTime),
    sa.Column("error", sa.Text),
    sa.Index("remit_notifications_due", "sent_at", "next_at"),
)

# A long `ctx.sleep`: one row per run and sleep step. While `sleeping`, the run's attempt has
# ended; at `wake_at` a worker's sweep moves the run to its next attempt, forked from the step.
timers = sa.Table(
    "remit_timers",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("step_id", sa.Integer, primary_key=True),
    # The attempt that slept here: where the next attempt is forked from.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("wake_at", UTCDateTime, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # sleeping, woken
    sa.Column("woken_at", UTCDateTime),
    sa.Column("resumed_workflow_id", sa.String(128)),
    sa.Index("remit_timers_due", "status", "wake_at"),
)

# A message sent to a run (`client.send`): kept, in order of `seq`, until a `ctx.wait_for` on
# its topic takes it (`taken`, at that wait's step), or refuses it (`refused`: its payload did
# not parse as the wait's model; `error` says why).
messages = sa.Table(
    "remit_messages",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("topic", sa.String(100), nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("key", sa.String(200)),
    sa.Column("sent_by", sa.String(200), nullable=False),
    sa.Column("sent_at", UTCDateTime, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # queued, taken, refused
    # The attempt the send moved its run to (None: the run was not waiting on the topic).
    sa.Column("resumed_workflow_id", sa.String(128)),
    sa.Column("step_id", sa.Integer),
    sa.Column("taken_at", UTCDateTime),
    sa.Column("error", sa.Text),
    sa.Index("remit_messages_run", "run_id", "topic", "status", "seq"),
    sa.Index("remit_messages_step", "run_id", "step_id"),
    # A key names one message to its run: the same send again replays it.
    sa.UniqueConstraint("run_id", "key", name="remit_messages_key"),
)

# A run waiting for something other than a person or a time: a message on a topic (`ctx.wait_for`)
# or its child runs' ends (`ctx.wait`). One row per run and wait step; while `waiting` on the
# run's current attempt, whatever it waits for moves the run on, forked from the step, as do its
# `deadline` (a message's timeout) passing. `ready` once the run was moved on for it.
waits = sa.Table(
    "remit_waits",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("step_id", sa.Integer, primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # message, children
    sa.Column("topic", sa.String(100)),
    # The children waited for (their run ids), for a wait on children.
    sa.Column("children", sa.JSON),
    # The attempt that waits here: where the next attempt is forked from.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deadline", UTCDateTime),
    sa.Column("status", sa.String(16), nullable=False),  # waiting, ready, timed_out
    sa.Column("resumed_workflow_id", sa.String(128)),
    sa.Index("remit_waits_due", "status", "deadline"),
    sa.Index("remit_waits_topic", "run_id", "topic", "status"),
)

# A child run (`ctx.start`): started at its parent's step `step_id`, under `key` there.
# Cancelling the parent cancels it unless it is `detached`.
children = sa.Table(
    "remit_children",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("parent_run_id", sa.String(64), nullable=False),
    sa.Column("step_id", sa.Integer, nullable=False),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("workflow", sa.String(200), nullable=False),
    sa.Column("detached", sa.Boolean, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("remit_children_parent", "parent_run_id", "created_at"),
)

# What a run published for the world to see (`ctx.publish`): the latest value of each key.
run_state = sa.Table(
    "remit_run_state",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("value", sa.JSON),
    sa.Column("step_id", sa.Integer, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# A change to the operations repo (`remit change open`): a branch moving through checks, review,
# merge and deploy as one run of the built-in `change` workflow (`changes/workflow.py`). The run
# writes the row as it goes; `status` is where it stands.
changes = sa.Table(
    "remit_changes",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("app", sa.String(100), nullable=False),
    sa.Column("remote", sa.String(100), nullable=False),
    sa.Column("branch", sa.String(255), nullable=False),
    sa.Column("base", sa.String(255), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("author", sa.String(200), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("number", sa.Integer),
    sa.Column("url", sa.Text),
    sa.Column("head", sa.String(64)),
    # opened, checking, failing, review, merged, deploying, deployed, unhealthy, rolled_back,
    # rejected, closed, failed
    sa.Column("status", sa.String(32), nullable=False),
    # The last checks: {"head": sha, "results": {name: {"ok": bool, "summary": str}}}.
    sa.Column("checks", sa.JSON),
    sa.Column("merge_commit", sa.String(64)),
    sa.Column("deployed", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Index("remit_changes_branch", "app", "branch", "created_at"),
    sa.Index("remit_changes_run", "run_id"),
)

# Each forge webhook delivery taken (`POST /forge/{remote}/events`), known by the hash of its
# signed body (`sha256:…`): a redelivery of one is answered from here and acts no more.
forge_deliveries = sa.Table(
    "remit_forge_deliveries",
    metadata,
    sa.Column("remote", sa.String(100), primary_key=True),
    sa.Column("delivery", sa.String(200), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("outcome", sa.JSON, nullable=False),
    sa.Column("received_at", UTCDateTime, nullable=False),
)

# What each host was deployed with, newest last: by a change run, its rollback, or a push to the
# base branch (an `apply` at a revision).
deploys = sa.Table(
    "remit_deploys",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("app", sa.String(100), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("revision", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # deploy, rollback
    sa.Column("change_id", sa.String(64)),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("healthy", sa.Boolean, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Index("remit_deploys_host", "app", "host", "id"),
)

# Each person's chats with the operator agent (`remit.agent`): the model that answers (`engine`),
# the act it proposes and the owner has not yet confirmed or discarded (`draft`), and the run of
# the turn going, if one is (`turn`, with `status` thinking).
chats = sa.Table(
    "remit_chats",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("app", sa.String(100), nullable=False),
    sa.Column("owner", sa.String(200), nullable=False),
    sa.Column("engine", sa.String(200), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("draft", sa.JSON),
    # The draft being confirmed (its id) and since when: one confirm acts at a time.
    sa.Column("acting", sa.String(64)),
    sa.Column("acting_since", UTCDateTime),
    sa.Column("status", sa.String(16), nullable=False),  # idle, thinking
    # The question the turn going answers (its message's `seq`), and the turn's run.
    sa.Column("asked", sa.Integer),
    sa.Column("turn", sa.String(64)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Index("remit_chats_owner", "app", "owner", "updated_at"),
)

# A chat's messages in order (`seq` from 1): what the person asked, the agent's answers and the
# reads it made, what became of each draft. `history` holds the model's own messages of a turn
# (pydantic-ai's JSON), which the next turn gives the model again.
chat_messages = sa.Table(
    "remit_chat_messages",
    metadata,
    sa.Column("chat_id", sa.String(64), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("history", sa.JSON),
    sa.Column("by", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(64)),
    # What wrote it, once however often its step ran: `<run id>:<what>`, or the request's key.
    sa.Column("key", sa.String(300)),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("chat_id", "key", name="remit_chat_messages_key"),
)

# One row per scheduled workflow of an app. Every instant of its schedule up to `swept_through`
# has been dealt with (fired, or skipped as its backfill says); `next_at` is the first one after,
# the schedule's deadline. A sweep writes the row only once `next_at` is due or the declaration
# changed; the run each instant starts has an id derived from the instant, so two workers
# sweeping at once start it once.
schedules = sa.Table(
    "remit_schedules",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("workflow", sa.String(200), primary_key=True),
    # The schedule as the worker that last wrote the row declared it.
    sa.Column("cron", sa.String(200), nullable=False),
    sa.Column("tz", sa.String(100), nullable=False),
    sa.Column("backfill", sa.String(16), nullable=False),
    sa.Column("swept_through", UTCDateTime, nullable=False),
    sa.Column("next_at", UTCDateTime, nullable=False),
    # The latest instant that has a run.
    sa.Column("last_fired_at", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Index("remit_schedules_next", "next_at"),
)

# One row per paused schedule (`remit schedules pause`), deleted when it is resumed. A sweep
# leaves a paused schedule's row in `remit_schedules` as it was, so on resuming, the instants
# that came meanwhile are missed instants, fired or skipped as the schedule's backfill says.
schedule_pauses = sa.Table(
    "remit_schedule_pauses",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("workflow", sa.String(200), primary_key=True),
    sa.Column("paused_at", UTCDateTime, nullable=False),
    sa.Column("paused_by", sa.String(200), nullable=False),
)

# One row per app that has ever been paused: `remit pause` sets `paused`, `remit resume` clears
# it. While paused, the app's queues dequeue nothing and running attempts park at their next
# step (see `pause.py`); no row means the app is not paused.
app_state = sa.Table(
    "remit_app_state",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("changed_at", UTCDateTime, nullable=False),
    sa.Column("changed_by", sa.String(200), nullable=False),
)

# An instance's side of its wakeup, one row per app: what a worker that stops when idle last
# registered with the wakeup service and when, whether it is running, stopping or stopped, and
# why its last check found it busy. A process that writes work while the row says `stopping` or
# `stopped` registers a wake for now (see `ops/idle.py`).
wakeups = sa.Table(
    "remit_wakeup",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),  # running, stopping, stopped
    sa.Column("executor_id", sa.String(200)),
    # The deadline last registered (None: the worker registered that nothing is due).
    sa.Column("at", UTCDateTime),
    sa.Column("registered_at", UTCDateTime),
    sa.Column("started_at", UTCDateTime),
    sa.Column("stopped_at", UTCDateTime),
    sa.Column("last_error", sa.Text),
    sa.Column("error_at", UTCDateTime),
    # Why the last idle check found the worker busy (None: idle, or never checked).
    sa.Column("busy", sa.Text),
    sa.Column("checked_at", UTCDateTime),
)

# Which vendor object each declared resource is bound to: what apply and import write, wherever
# they run, and what `remit.lock` in the app's folder is written from.
bindings = sa.Table(
    "remit_bindings",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("type", sa.String(200), nullable=False),
    sa.Column("vendor_id", sa.String(500), nullable=False),
    sa.Column("bound_at", UTCDateTime, nullable=False),
    sa.Column("bound_by", sa.String(200), nullable=False),
)

# What `drift` found: one open row per difference between the vendors and the data files (its
# fingerprint), seen pass after pass until the world matches again or differs otherwise.
drift = sa.Table(
    "remit_drift",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # open, closed
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("changes", sa.JSON, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("opened_at", UTCDateTime, nullable=False),
    sa.Column("seen_at", UTCDateTime, nullable=False),
    sa.Column("passes", sa.Integer, nullable=False),
    sa.Column("closed_at", UTCDateTime),
    sa.Index("remit_drift_open", "app", "status"),
)

# An app's stored credentials (`remit secrets`): each value encrypted with the app's secret key
# (see `connectors/credentials.py`); no column ever holds a value in the clear.
secrets = sa.Table(
    "remit_secrets",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("ciphertext", sa.Text, nullable=False),
    sa.Column("set_at", UTCDateTime, nullable=False),
    sa.Column("set_by", sa.String(200), nullable=False),
)

# What each `ctx.transaction` committed: its step's outcome, written in the same transaction as
# the app's own writes. A step that runs again (its worker died before DBOS recorded it, or a
# retry carries on from before it) finds its row and answers from it, writing nothing again.
app_writes = sa.Table(
    "remit_app_writes",
    metadata,
    sa.Column("run_id", sa.String(100), primary_key=True),
    # The step's position in the run (its DBOS step id, the same in every attempt).
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("workflow_id", sa.String(120), nullable=False),
    sa.Column("outcome", sa.JSON, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
)

# The records of an app's collections: one row per collection and key, the record as JSON.
data = sa.Table(
    "remit_data",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    sa.Column("collection", sa.String(200), primary_key=True),
    sa.Column("key", sa.String(500), primary_key=True),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("updated_by", sa.String(200), nullable=False),
)

# Every action a policy refused: who asked to do what to which resource, and why not.
denials = sa.Table(
    "remit_denials",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("principal", sa.String(200), nullable=False),
    sa.Column("action", sa.String(40), nullable=False),
    sa.Column("resource", sa.String(300), nullable=False),
    sa.Column("context", sa.JSON, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Index("remit_denials_at", "app", "at"),
)

# Spend: one row per budget and period (`budgets.py`). `spent_usd` is what settled calls cost,
# `reserved_usd` what calls in flight may still cost at most; a call is refused before it is
# made when spent + reserved + its own reservation would pass `limit_usd`.
budget_periods = sa.Table(
    "remit_budget_periods",
    metadata,
    sa.Column("app", sa.String(200), primary_key=True),
    # `app`, or `workflow:<name>` for a workflow's own budget.
    sa.Column("scope", sa.String(250), primary_key=True),
    # The period's key, e.g. `2026-11` (monthly), `2026-W48` (weekly), `2026-11-29` (daily).
    sa.Column("period", sa.String(20), primary_key=True),
    sa.Column("limit_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("spent_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("reserved_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # Who set the limit by hand (`remit budgets set-limit`, `ctx.raise_budget`). While None the
    # limit follows the app's declared `Budget`; once set, it stays for the period.
    sa.Column("limit_set_by", sa.String(200)),
)

# One row per call that reserved spend: what it reserved, against which budget periods, and what
# it came to. A reservation still `reserved` after its attempt ended is released by the
# reconciler.
reservations = sa.Table(
    "remit_reservations",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("workflow_id", sa.String(128), nullable=False),
    # One reservation per call: a call re-entered after a crash takes its reservation over, and
    # the ledger row with this key is the call's record (its `cost` is what the call settled at).
    sa.Column("idempotency_key", sa.String(300), nullable=False, unique=True),
    sa.Column("op_id", sa.String(200), nullable=False),
    # [[scope, period], ...]: every budget period the call counts against.
    sa.Column("periods", sa.JSON, nullable=False),
    sa.Column("reserved_usd", sa.Numeric(18, 6), nullable=False),
    sa.Column("cost_usd", sa.Numeric(18, 6)),
    sa.Column("status", sa.String(16), nullable=False),  # reserved, settled, released
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("settled_at", UTCDateTime),
    sa.Index("remit_reservations_open", "status", "created_at"),
)

# A person's task: confirm whether a write whose outcome is unknown happened. One per ledger row
# (its idempotency key); resolving it carries the run on, or records the answer. A call made
# again after "not done" that is cut off again reopens the same task (`remit_audit` keeps each
# resolution).
tasks = sa.Table(
    "remit_tasks",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    # The attempt that waits on it and the op's DBOS step: where the run's next attempt is
    # forked from, so the steps before the call are copied, not run again.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("step_id", sa.Integer, nullable=False),
    sa.Column("op_id", sa.String(200), nullable=False),
    sa.Column("idempotency_key", sa.String(300), nullable=False, unique=True),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # open, done, not_done
    # The call's output as the person gave it (done only).
    sa.Column("output", sa.JSON),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("resolved_at", UTCDateTime),
    sa.Column("resolved_by", sa.String(200)),
    # The key the resolution was made with: the same key again replays it.
    sa.Column("resolve_key", sa.String(200)),
    # The attempt the resolution resumed the run on (None when no attempt waited on it).
    sa.Column("resumed_workflow_id", sa.String(128)),
    sa.Index("remit_tasks_status", "app", "status"),
    sa.Index("remit_tasks_run", "run_id"),
)

# Every outcome of an op call that its ledger row no longer holds: a try the vendor refused
# before the call was tried again, and the outcome an earlier attempt (or an earlier apply)
# left before the call was made again under its key (`ledger.py`). The row keeps the last.
ledger_tries = sa.Table(
    "remit_ledger_tries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("idempotency_key", sa.String(300), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    # Which try of that attempt's call, and what came of it: `failed` (the vendor refused it,
    # or the driver failed), or the status the row had when the call was made again.
    sa.Column("try_number", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Index("remit_ledger_tries_key", "idempotency_key"),
)

# What a write that cannot be repeated was sent (its input, its secrets redacted), written with
# its `started` ledger row: if its outcome is ever unknown, the person its task asks sees it.
call_inputs = sa.Table(
    "remit_call_inputs",
    metadata,
    sa.Column("idempotency_key", sa.String(300), primary_key=True),
    sa.Column("input", sa.JSON, nullable=False),
)

# Where each run of an attempt stopped, for an attempt DBOS recovered after its worker died:
# each recovery appends the position it resumes at (`ops/recoveries.py`).
recoveries = sa.Table(
    "remit_recoveries",
    metadata,
    sa.Column("workflow_id", sa.String(128), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("stops", sa.JSON, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

# One row per `retry` that moved a run: a repeated retry key reads it back.
retries = sa.Table(
    "remit_retries",
    metadata,
    sa.Column("retry_key", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    # The attempt the retry started, and the step it carried on from.
    sa.Column("workflow_id", sa.String(128), nullable=False),
    sa.Column("from_step", sa.Integer, nullable=False),
    sa.Column("retried_by", sa.String(200), nullable=False),
    sa.Column("retried_at", UTCDateTime, nullable=False),
)

# What happened about each of the business's records (an invoice, say): one row per run
# started or ended, gate opened or decided, task opened or answered, and record archived, for
# the runs, gates and tasks that name a record (see `activity.py`). The row of a run's start,
# a gate's opening and a task's opening is also where the record that run, gate or task
# concerns is kept.
activity = sa.Table(
    "remit_activity",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("app", sa.String(200), nullable=False),
    sa.Column("record_type", sa.String(100), nullable=False),
    sa.Column("record_id", sa.String(200), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
    # e.g. run.started, approval.opened, approval.approved, task.done, record.archived
    sa.Column("kind", sa.String(50), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("run_id", sa.String(64)),
    # The approval or task the row is about, if any.
    sa.Column("target", sa.String(64)),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("meta", sa.JSON, nullable=False),
    sa.Index("remit_activity_record", "app", "record_type", "record_id", "id"),
    sa.Index("remit_activity_run", "run_id", "kind"),
    sa.Index("remit_activity_target", "target", "kind"),
)
