"""The built-in `apply` and `drift` workflows, and what an app's resources are made of.

`apply` plans inside the run (each `plan` call a step in the ledger), checks the plan is the one
its starter was shown, asks one approval before any delete or replace of a resource that holds
state, then walks the plan in reference order: each create, update or delete a keyed call, and
each new binding written to the database and the lockfile in a step of its own right after. A run that crashes
resumes where it was: the calls already made answer from the record, a call cut off is made
again with its key (the vendor makes nothing twice), and every binding it made is in the file.

`drift` makes the same plan and records what differs as a finding (`findings.py`), opened once
per difference. Declared with `App(drift_schedule="0 * * * *")`, it runs on that schedule. It
leaves a host's `source()` revision out: a change's deploy moves it, not a person at a console.

A host's revision declared as `source("main")` is resolved before the plan: to the revision an
apply is pinned to (`ApplyInput.revision`, a change's merged commit, whose data files it then
reads), else to the commit `main` is at, through the app's remote (`Resources.resolve_source`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, Field

from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.fence import FINISHED
from remit.core.ledger import input_hash
from remit.core.runs import app_runs
from remit.core.schema import ledger, runs
from remit.declare.ops import Op
from remit.declare.resources import (
    Applied,
    Declaration,
    Made,
    ReadOut,
    ResourceType,
    database_url_secret,
)
from remit.declare.schedules import Schedule, schedule
from remit.declare.workflows import Workflow, workflow
from remit.execution.context import Context
from remit.people.approvals import ApprovalType
from remit.resources.bindings import Bindings
from remit.resources.files import Declared, source_refs, with_sources, without_sources
from remit.resources.findings import Findings
from remit.resources.lockfile import Binding, Lockfile
from remit.resources.people import PEOPLE_TYPES, is_local, local_fields
from remit.resources.planner import Caller, Change, Plan, plan, resolve

APPLY = "apply"
DRIFT = "drift"
# The approval type apply asks through before a stateful delete or replace.
APPROVAL = "apply"
# The built-in op that finds the commit a branch of the app's repo is at: apply lists it among
# its uses when the app has it, for `Resources.resolve_source` to call.
SOURCE_OP = "remit.source.resolve"
# A revision: a git commit's sha, abbreviated or whole.
REVISION = r"^[0-9a-f]{7,64}$"


class Seen(BaseModel):
    """One change as the plan shown to who started the apply had it."""

    action: str
    basis: str | None = None
    # The change's digest (`Change.digest`): its fields and values as shown.
    digest: str | None = None


class ApplyInput(BaseModel):
    """`seen`: the pending changes of the plan shown when apply was asked for, by name; the
    run stops without changing anything if its own plan differs. None: apply what it plans.
    `revision`: the commit to deploy: the data files are read as they are at it (where the app
    can read them there, `Resources.read_at`), and each host's `source()` revision is it."""

    seen: dict[str, Seen] | None = None
    revision: str | None = Field(default=None, pattern=REVISION)


class Destroyed(BaseModel):
    name: str
    type: str
    id: str | None = None
    action: str


class ApplyDraft(BaseModel):
    """What an apply asks approval for: the deletes and replaces of stateful resources."""

    changes: list[Destroyed] = Field(default_factory=list)
    summary: str = ""


class DriftInput(BaseModel):
    scheduled_at: datetime | None = None


# How a `source()` revision is resolved: (the run, None outside one; the branch) → the commit.
SourceResolver = Callable[[Context | None, str], str]
# How the data files are read at a revision: the commit → the declarations as JSON, by name,
# `{"type": ..., "fields": ...}` (as `Declared.as_json` makes them).
FilesReader = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True)
class Resources:
    """An app's resources: the types its connectors declare, the data files' declarations,
    and the lockfile. `resolve_source` finds the commit a `source()` branch is at (in a run, a
    recorded call; None: the app has no remote, and a `source()` needs a revision given);
    `read_at` reads the data files as they are at a revision (None: this worker's files are
    read whatever the revision)."""

    types: Mapping[str, ResourceType]
    declared: Declared
    lockfile: Lockfile
    app: str = ""
    resolve_source: SourceResolver | None = None
    read_at: FilesReader | None = None

    def store(self, db: Database) -> Bindings:
        """The bindings in `db` (the truth), mirrored to the lockfile."""
        return Bindings(db, self.app, self.lockfile)

    def plan(
        self,
        call: Caller,
        bindings: Mapping[str, Binding] | None = None,
        *,
        revision: str | None = None,
    ) -> Plan:
        """The plan against `bindings` (default: the lockfile's), made outside a run: of the
        data files at `revision` when it is given, each `source()` resolved to it (else through
        `resolve_source`, with no run)."""
        bound = self.lockfile.read() if bindings is None else bindings
        if revision is None and not any(d.sources() for d in self.declared.by_name.values()):
            return plan(self.declared, bound, self.types, call)
        files = self.files(revision)
        resolve = self.resolve_source
        resolver = None if resolve is None else (lambda ref: resolve(None, ref))
        declared = self.declared_of(with_sources(files, self.revisions(files, revision, resolver)))
        return plan(declared, bound, self.types, call)

    def files(self, revision: str | None = None) -> dict[str, dict[str, Any]]:
        """The declarations as JSON, by name: as the data files are at `revision` when it is
        given and the app reads them there (`read_at`), else as this worker's files are."""
        if revision is None or self.read_at is None:
            return self.declared.as_json()
        read = self.read_at(revision)
        if not isinstance(read, Mapping) or not all(
            isinstance(each, Mapping)
            and isinstance(each.get("type"), str)
            and isinstance(each.get("fields"), Mapping)
            for each in read.values()
        ):
            raise RemitError(
                f"the data files at {revision} were read as {str(read)[:200]}, not as "
                'declarations by name, each {"type": ..., "fields": ...}: check the '
                "app's read_at (`remit resources --declared` prints them so)"
            )
        return {
            str(name): {"type": each["type"], "fields": dict(each["fields"])}
            for name, each in read.items()
        }

    def revisions(
        self,
        files: Mapping[str, Mapping[str, Any]],
        revision: str | None,
        resolve: Callable[[str], str] | None,
    ) -> dict[str, str]:
        """The commit each branch a `source()` of `files` names is at: `revision` when one is
        given, else what `resolve` finds; refused, saying what to do, when neither is there."""
        refs = source_refs(files)
        if revision is not None:
            return dict.fromkeys(refs, revision)
        if not refs:
            return {}
        if resolve is None:
            takers = sorted(
                f"`{name}`" for name, each in files.items() if source_refs({name: each})
            )
            branches = " and ".join(f"`{ref}`" for ref in refs)
            marks = ", ".join(f'source("{ref}")' for ref in refs)
            one = len(takers) == 1
            raise RemitError(
                f"{', '.join(takers)} take{'s its' if one else ' their'} revision from "
                f"{branches} ({marks}), and the app has no remote to resolve {branches} "
                "against: declare a remote (a connector with `remote=Remote(...)`), or give "
                "the revision to deploy (`--revision SHA`, or `revision` in apply's input)"
            )
        found: dict[str, str] = {}
        for ref in refs:
            sha = resolve(ref)
            if not isinstance(sha, str) or not re.fullmatch(REVISION, sha):
                raise RemitError(
                    f"resolving the branch `{ref}` gave {sha!r}, not a commit's sha: check "
                    "the app's remote and that the branch exists there"
                )
            found[ref] = sha
        return found

    def declared_of(self, files: Mapping[str, Mapping[str, Any]]) -> Declared:
        """Declarations as JSON (`files`) as the app's `Declared`, checked and ordered."""
        types = {**self.types, **PEOPLE_TYPES}
        missing = sorted({f["type"] for f in files.values()} - set(types))
        if missing:
            raise RemitError(
                f"the data files read declare {', '.join(missing)}, which no connector of the "
                "app declares now: put the connector back, or start a new apply"
            )
        return Declared.of(
            {n: Declaration(types[f["type"]], f["fields"]) for n, f in files.items()},
            self.types,
        )


def _bindings(raw: Mapping[str, Any]) -> dict[str, Binding]:
    return {name: Binding(type=b["type"], id=b["id"]) for name, b in raw.items()}


def _run_caller(ctx: Context, ops: Mapping[str, Op[Any, Any]]) -> Caller:
    def call(op: Op[Any, Any], payload: dict[str, Any], key: str) -> BaseModel:
        answer: BaseModel = ctx.call(ops[op.id], payload, key=key)
        return answer

    return call


def _planned(
    ctx: Context,
    resources: Resources,
    ops: Mapping[str, Op[Any, Any]],
    revision: str | None = None,
    *,
    sources: bool = True,
) -> tuple[Declared, Plan]:
    """The data files (at `revision` when given) and the lockfile as this run read them (each
    a step, so a resumed run goes on with what it planned and was approved, whatever the files
    say by then), and the plan made from them, each `source()` resolved first (left out of
    the plan when not `sources`)."""
    files = ctx.step("read the data files", lambda: resources.files(revision))
    resolve = resources.resolve_source
    resolver = None if resolve is None else (lambda ref: resolve(ctx, ref))
    if not sources:
        files = without_sources(files)
    elif source_refs(files):
        files = with_sources(files, resources.revisions(files, revision, resolver))
    db, app = ctx.app_database
    store = Bindings(db, app, resources.lockfile)
    raw = ctx.step(
        "read the bindings",
        lambda: {n: {"type": b.type, "id": b.id} for n, b in store.read().items()},
    )
    declared = resources.declared_of(files)
    return declared, plan(declared, _bindings(raw), resources.types, _run_caller(ctx, ops))


def apply_workflow(resources: Resources, ops: Mapping[str, Op[Any, Any]]) -> Workflow:
    """The built-in workflow `apply` (see the module)."""
    used = [
        ops[op_id]
        for rtype in resources.types.values()
        for op_id in [*(o.id for o in rtype.ops.values()), *(s.op for s in rtype.after_create)]
    ]
    used += [ops[SOURCE_OP]] if SOURCE_OP in ops else []

    @workflow(name=APPLY, input=ApplyInput, uses=list({o.id: o for o in used}.values()))
    def apply(ctx: Context, input: ApplyInput) -> dict[str, Any]:
        db, _ = ctx.app_database
        run_id = ctx.run_id
        ctx.step("check no other apply", lambda: _alone(db, run_id, resources.app))
        declared, the_plan = _planned(ctx, resources, ops, input.revision)
        refused = [c for c in the_plan.pending if c.refused]
        if refused:
            raise RemitError(
                "apply cannot make this plan: "
                + "; ".join(f"`{c.name}`: {c.refused}" for c in refused)
            )
        if input.seen is not None:
            _check_seen(the_plan, input.seen)
        destructive = [c for c in the_plan.pending if c.destructive]
        if destructive:
            decision = ctx.approval(
                "destroy",
                type=APPROVAL,
                title="apply deletes or replaces "
                + ", ".join(f"{c.name} ({c.type})" for c in destructive),
                draft=ApplyDraft(
                    changes=[
                        Destroyed(name=c.name, type=c.type, id=c.id, action=c.action)
                        for c in destructive
                    ],
                    summary=the_plan.summary(),
                ),
            )
            if not decision.approved:
                return {"outcome": decision.status, "applied": [], "summary": the_plan.summary()}
        walk = _Walk(ctx, resources, declared, ops)
        # The creates earlier applies began and never bound: a create of the same declaration
        # settles them rather than making its resource a second time.
        if ctx.patch("settle-earlier-creates"):
            walk.earlier = ctx.step(
                "earlier creates", lambda: _earlier_creates(db, resources, run_id)
            )
        for change in the_plan.changes:
            walk.apply(change)
        return {"outcome": "applied", "applied": walk.applied, "summary": the_plan.summary()}

    return apply


class _Walk:
    """One apply's pass over its plan, keeping what each resource is once dealt with, for the
    references of those after it."""

    def __init__(
        self,
        ctx: Context,
        resources: Resources,
        declared: Declared,
        ops: Mapping[str, Op[Any, Any]],
    ) -> None:
        self.ctx = ctx
        self.resources = resources
        self.declared = declared
        self.ops = ops
        db, app = ctx.app_database
        self.store = Bindings(db, app, resources.lockfile)
        # What references resolve to: the declared people (held by no vendor) as declared,
        # and each resource as apply leaves it.
        self.known: dict[str, Mapping[str, Any] | None] = {
            name: local_fields(d) for name, d in declared.by_name.items() if is_local(d.type)
        }
        self.applied: list[dict[str, Any]] = []
        # By declaration: the last create an earlier apply began (`_earlier_creates`).
        self.earlier: dict[str, dict[str, Any]] = {}

    def apply(self, change: Change) -> None:
        declaration = self.declared.by_name.get(change.name)
        rtype = self.resources.types[change.type]
        if declaration is None:
            if change.action == "delete" and change.id is not None and not change.forget:
                self._call(rtype, "delete", {"id": change.id}, f"delete:{change.name}")
            if change.action == "delete":
                self._forget_url(rtype, change.name)
                self._unbind(change.name)
                self._done(change, change.id)
            return
        desired, unknown = resolve(declaration.fields, self.known)
        if unknown:
            raise RemitError(
                f"apply of `{change.name}`: {', '.join(unknown)} reference what has no value "
                "once its resource was applied; check the reference names a field the vendor sets"
            )
        action, basis, replace = change.action, change.basis, list(change.replace)
        moved = desired != dict(change.desired or {})
        if (change.unknown or moved) and change.id is not None and not change.gone:
            # A reference only known now, or changed by what apply did before: plan again
            # with its value.
            fresh = self._call(
                rtype, "plan", {"id": change.id, "desired": desired}, f"replan:{change.name}"
            )
            action = str(getattr(fresh, "action", action))
            basis = getattr(fresh, "basis", basis)
            replace = list(getattr(fresh, "replace", replace))
            if action in ("delete", "replace") and not rtype.stateless and not change.destructive:
                raise RemitError(
                    f"apply of `{change.name}`: a reference's new value forces a replace of a "
                    f"stateful {rtype.id}; run `remit plan` and apply again to be asked"
                )
        if action == "none":
            self.known[change.name] = change.state
            return
        if action == "update":
            applied = self._call(
                rtype,
                "update",
                {
                    "id": change.id,
                    "desired": desired,
                    "expect": {"action": "update", "replace": replace, "basis": basis},
                },
                f"update:{change.name}",
            )
            self.known[change.name] = Applied.model_validate(applied.model_dump()).state
            self._done(change, change.id)
            return
        if action == "replace" and change.id is not None:
            self._call(rtype, "delete", {"id": change.id}, f"replace-delete:{change.name}")
        if change.id is not None:
            # The object it replaces, or one gone at the vendor: its URL names nothing now.
            self._forget_url(rtype, change.name)
        key = f"{'replace-' if action == 'replace' else ''}create:{change.name}"
        payload = {"desired": desired}
        earlier = self._settled(rtype, change.name, payload)
        created = (
            self._call(rtype, "create", payload, key)
            if earlier is None
            else self.ctx._call_under(
                self.ops[rtype.ops["create"].id], payload, idempotency_key=earlier
            )
        )
        made = Applied.model_validate(created.model_dump())
        store, by = self.store, self.ctx.run_id

        def bind() -> str:
            store.bind(change.name, Binding(rtype.id, made.id), by=by)
            return made.id

        self.ctx.step(f"bind {change.name}", bind)
        for index, step in enumerate(rtype.after_create):
            self.ctx.call(
                self.ops[step.op],
                step.input(Made(name=change.name, id=made.id, state=made.state)),
                key=f"after:{change.name}:{index}",
            )
        self.known[change.name] = made.state
        self._done(change, made.id)

    def _settled(self, rtype: ResourceType, name: str, payload: dict[str, Any]) -> str | None:
        """The idempotency key to create `name` under: the one an earlier apply began its
        create under, if that create must be settled first; None for a key of this run's.

        A create of the same fields whose outcome was never learned (`started`, `abandoned`,
        `not_done`) is made again under its key: the vendor makes the resource once. One that
        answered replays its answer if the vendor still holds what it made, which is read
        first; one the vendor no longer holds (deleted or replaced since), or one of other
        fields, is made afresh. One that is `uncertain` waits for a person's answer to its
        task, and one of other fields whose outcome is unknown is refused, saying what to do."""
        earlier = self.earlier.get(name)
        if earlier is None or earlier["op"] != rtype.ops["create"].id:
            return None
        key, status = str(earlier["key"]), earlier["status"]
        same = earlier["input_hash"] == input_hash(payload)
        if status == "ok":
            made = earlier.get("id")
            if not same or not isinstance(made, str):
                return None  # it made something else, since replaced or deleted
            held = ReadOut.model_validate(
                self._call(rtype, "read", {"id": made}, f"settle:{name}").model_dump()
            )
            return None if held.gone else key
        if status not in ("started", "abandoned", "not_done", "uncertain"):
            return None  # the vendor refused it: nothing was made
        if not same:
            raise RemitError(
                f"apply of `{name}`: an earlier apply, run {earlier['run_id']}, began creating "
                f"it with other fields (key {key}) and never learned whether it did: declare "
                "the fields as they were, so that this apply settles that create, or check "
                f"{rtype.id} at the vendor and bind or delete what it holds there"
            )
        if status == "uncertain":
            raise RemitError(
                f"apply of `{name}`: an earlier apply, run {earlier['run_id']}, began creating "
                f"it (key {key}) and a person is asked whether it did: answer its task "
                "(`remit tasks`), then apply again"
            )
        return key

    def _call(self, rtype: ResourceType, name: str, payload: dict[str, Any], key: str) -> Any:
        return self.ctx.call(self.ops[rtype.ops[name].id], payload, key=key)

    def _forget_url(self, rtype: ResourceType, name: str) -> None:
        """A database deleted takes its URL secret with it: the URL names nothing now, and the
        new one's `store_url` stores its own (it refuses to overwrite another's)."""
        if rtype.database is None:
            return
        secret_name = database_url_secret(name)
        store, by = self.ctx.app_secrets, self.ctx.actor

        def forget() -> str:
            if store is not None:
                store.delete(secret_name, by=by)
            return secret_name

        self.ctx.step(f"forget {secret_name}", forget)

    def _unbind(self, name: str) -> None:
        store = self.store

        def unbind() -> str:
            store.unbind(name)
            return name

        self.ctx.step(f"unbind {name}", unbind)

    def _done(self, change: Change, made: str | None) -> None:
        self.applied.append({"name": change.name, "action": change.action, "id": made})


def _earlier_creates(db: Database, resources: Resources, run_id: str) -> dict[str, Any]:
    """By declaration, the last create an earlier apply of the app (one that has finished)
    began: its key, op, input hash, status, run and the id it made, if it answered. A create
    that was bound is read back from the vendor before it is trusted (`_Walk._settled`)."""
    creates = {t.ops["create"].id for t in resources.types.values() if "create" in t.ops}
    suffixes = (":key:create:", ":key:replace-create:")
    query = (
        sa.select(
            ledger.c.idempotency_key,
            ledger.c.op_id,
            ledger.c.input_hash,
            ledger.c.status,
            ledger.c.run_id,
            ledger.c.output,
        )
        .join(runs, runs.c.run_id == ledger.c.run_id)
        .where(
            runs.c.workflow == APPLY,
            runs.c.run_id != run_id,
            app_runs(resources.app or None),
            runs.c.status.in_(FINISHED),
            ledger.c.op_id.in_(sorted(creates)),
            sa.or_(*(ledger.c.idempotency_key.contains(s, autoescape=True) for s in suffixes)),
        )
        .order_by(ledger.c.started_at, ledger.c.id)
    )
    rows = db.read(
        f"run {run_id}: earlier applies' creates", lambda conn: conn.execute(query).all()
    )
    found: dict[str, Any] = {}
    for row in rows:
        name = next(
            row.idempotency_key.split(s, 1)[1] for s in suffixes if s in row.idempotency_key
        )
        output = row.output if isinstance(row.output, dict) else {}
        found[name] = {
            "key": row.idempotency_key,
            "op": row.op_id,
            "input_hash": row.input_hash,
            "status": row.status,
            "run_id": row.run_id,
            "id": output.get("id"),
        }
    return found


def unfinished_apply(
    db: Database, app: str, *, before: str | None = None
) -> tuple[str, str] | None:
    """The first apply of the app (id and status) that has not finished, started before the
    run `before` if given; None if there is none. Another app's applies (on the same database)
    are its own."""

    def read(conn: sa.Connection) -> tuple[Any, list[Any]]:
        mine = None
        if before is not None:
            mine = conn.execute(
                sa.select(runs.c.created_at).where(runs.c.run_id == before)
            ).scalar()
        others = conn.execute(
            sa.select(runs.c.run_id, runs.c.status, runs.c.created_at).where(
                runs.c.workflow == APPLY,
                runs.c.run_id != (before or ""),
                app_runs(app or None),
                runs.c.status.not_in(FINISHED),
            )
        ).all()
        return mine, list(others)

    mine, others = db.read(f"app {app}: unfinished applies", read)
    earlier = [
        row
        for row in others
        if before is None or mine is None or (row.created_at, row.run_id) < (mine, before)
    ]
    if not earlier:
        return None
    first = min(earlier, key=lambda row: (row.created_at, row.run_id))
    return first.run_id, first.status


def _alone(db: Database, run_id: str, app: str) -> str:
    """Refuse to go on while an earlier apply of the app is unfinished: two applies planning at
    once would each make what the other makes. Of two started together, the earlier goes on."""
    first = unfinished_apply(db, app, before=run_id)
    if first is not None:
        other, status = first
        raise RemitError(
            f"another apply, run {other}, is {status} and started first: wait "
            f"for it to finish (`remit show {other}`), or cancel it (`remit cancel "
            f"{other}`), then apply again"
        )
    return run_id


def _check_seen(the_plan: Plan, seen: Mapping[str, Seen]) -> None:
    now = {c.name: c for c in the_plan.pending}
    moved: list[str] = []
    for name in sorted(set(now) | set(seen)):
        was, is_ = seen.get(name), now.get(name)
        if was is None:
            moved.append(f"`{name}` now needs {is_.action if is_ else 'nothing'}")
        elif is_ is None:
            moved.append(f"`{name}` needed {was.action} and now needs nothing")
        elif was.action != is_.action or (was.basis or None) != (is_.basis or None):
            moved.append(f"`{name}` was {was.action} and is now {is_.action} of another state")
        elif was.digest is not None and was.digest != is_.digest():
            moved.append(f"`{name}` is still {is_.action}, to other values than were shown")
    if moved:
        raise RemitError(
            "the plan changed since it was shown, so apply changed nothing: "
            + "; ".join(moved)
            + ". Run `remit plan` again and apply what it shows"
        )


def drift_workflow(
    resources: Resources, ops: Mapping[str, Op[Any, Any]], when: str | Schedule | None
) -> Workflow:
    """The built-in workflow `drift` (see the module), on a schedule when one is given (a
    cron expression in UTC, or a `schedule(...)`)."""
    used = [ops[rtype.ops["plan"].id] for rtype in resources.types.values()]
    trigger = schedule(when) if isinstance(when, str) else when

    @workflow(name=DRIFT, input=DriftInput, uses=used, trigger=trigger)
    def drift(ctx: Context, input: DriftInput) -> dict[str, Any]:
        _, the_plan = _planned(ctx, resources, ops, sources=False)
        db, app = ctx.app_database
        run_id = ctx.run_id
        recorded = ctx.step(
            "record drift", lambda: Findings(db, app).record(the_plan, run_id=run_id)
        )
        return {
            "drifted": the_plan.has_changes,
            "summary": the_plan.summary(),
            "fingerprint": the_plan.fingerprint() if the_plan.has_changes else None,
            "plan": the_plan.as_json(),
            "finding": recorded,
        }

    return drift


def approval_type() -> ApprovalType:
    return ApprovalType(APPROVAL, draft=ApplyDraft, description="a delete or replace by apply")
