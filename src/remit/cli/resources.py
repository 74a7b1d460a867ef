"""`remit plan`, `remit apply`, `remit drift`, `remit import` and `remit resources`: the app's
declared resources (see `remit/resources/`).

`plan` and `drift` exit as `terraform plan -detailed-exitcode` does: 0 when the vendors match
the data files, 2 when something differs, 1 on an error.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    err,
    exit_now,
    here_only,
    load,
    out,
    print_json,
)

if TYPE_CHECKING:
    from remit.app import App
    from remit.core.runs import Run
    from remit.core.settings import Settings
    from remit.resources.bindings import Bindings
    from remit.resources.planner import Caller
    from remit.resources.workflows import Resources
    from remit.serve.worker import Worker

NO_CHANGES, ERROR, CHANGES = 0, 1, 2

Revision = Annotated[
    str | None,
    typer.Option(
        "--revision",
        metavar="SHA",
        help="The commit to deploy: the data files as they are at it, and each host's "
        "source() revision. Default: the commit each source() branch is at.",
    ),
]


def _resources(app: "App") -> "Resources":
    from remit.core.errors import AppError

    if app.resources is None:
        raise AppError(
            f"app `{app.name}` declares no resources: add a `resources/` folder beside its "
            "app.py with a module declaring one, e.g. `www = record(zone=..., name=...)`"
        )
    return app.resources


def _session(app: "App", settings: "Settings", actor: str) -> tuple["Caller", "Bindings"]:
    """How the command reads the vendors (their ops called directly), and the app's bindings
    (in its database, mirrored to remit.lock)."""
    from remit.core.database import Database
    from remit.ops.runtime import implementations_for
    from remit.resources.direct import direct_caller

    db = Database.of(settings, pool_size=1)
    db.prepare()
    implementations, credentials = implementations_for(app, db, settings)
    call = direct_caller(implementations, credentials, actor=actor, timeout=settings.op_timeout)
    return call, _resources(app).store(db)


def _told_apart(store: "Bindings") -> None:
    """Say on stderr where remit.lock says other than the database, which wins."""
    differ = store.differences()
    if differ:
        err.print(
            Text(
                "remit.lock differs from the bindings in the database, which the plan uses "
                "(`remit apply` writes the file from them):\n  " + "\n  ".join(differ)
            )
        )


def _exported(store: "Bindings") -> None:
    if store.export():
        err.print(f"{store.lockfile.path} written from the database's bindings")


def _exit(code: int) -> None:
    exit_now(code)


@cli.command()
def plan(
    unchanged: Annotated[
        bool, typer.Option("--unchanged", help="List the resources that match too.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    revision: Revision = None,
    app_dir: AppDir = None,
) -> None:
    """Show what `remit apply` would change: per resource, the action and each field's
    change (old → new), why a replace is needed, write-only values as (sensitive).

    Reads the data files, remit.lock and the vendors; changes nothing. Exits 0 when nothing
    would change, 2 when something would, 1 on an error."""
    here_only("plan")
    app, settings = load(app_dir)
    call, store = _session(app, settings, settings.actor)
    the_plan = _resources(app).plan(call, store.read(), revision=_revision(revision))
    _told_apart(store)
    if as_json:
        print_json(the_plan.as_json())
    else:
        out.print(Text(the_plan.render(unchanged=unchanged)))
    _exit(the_plan.exit_code)


@cli.command()
def apply(
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Apply the plan shown without asking first.")
    ] = False,
    as_: ActAs = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to serve the apply run here before leaving it.")
    ] = 3600.0,
    revision: Revision = None,
    app_dir: AppDir = None,
) -> None:
    """Plan, then apply the plan as the durable built-in run `apply`, served in this process.

    The run walks the resources in reference order; it asks an approval (`remit approve ID`)
    before it deletes or replaces a resource that holds state, and writes remit.lock as each
    resource is bound. If the vendors changed since the plan shown, it changes nothing and
    says so. A crashed apply is resumed by any worker, making nothing twice."""
    from remit.resources.workflows import APPLY, unfinished_apply

    here_only("apply")
    app, settings = load(app_dir)
    actor = as_ or settings.actor
    call, store = _session(app, settings, actor)
    earlier = unfinished_apply(store.db, app.name)
    if earlier is not None:
        # A second apply would only wait for it and fail: carry it on here, then plan.
        err.print(f"an earlier apply, run {earlier[0]}, is {earlier[1]}: carrying it on first")
        carried = serve_run_here(
            app, settings, APPLY, None, actor, timeout, lambda run: None, _progress(), earlier[0]
        )
        _exported(store)
        if not _reported(carried):
            _exit(ERROR)
    pinned = _revision(revision)
    the_plan = _resources(app).plan(call, store.read(), revision=pinned)
    _told_apart(store)
    out.print(Text(the_plan.render()))
    if not the_plan.has_changes:
        _exported(store)
        _exit(NO_CHANGES)
    if not yes:
        if not sys.stdin.isatty():
            err.print("apply asks before it changes anything: pass --yes to apply this plan")
            _exit(ERROR)
        if not typer.confirm("Apply this plan?", default=False):
            err.print("nothing applied")
            _exit(ERROR)
    seen = {
        c.name: {"action": c.action, "basis": c.basis, "digest": c.digest()}
        for c in the_plan.pending
    }

    def started(run: "Run") -> None:
        err.print(f"applying as run {run.run_id} on {'fakes' if settings.fakes else 'drivers'}")

    current = serve_run_here(
        app,
        settings,
        APPLY,
        {"seen": seen} if pinned is None else {"seen": seen, "revision": pinned},
        actor,
        timeout,
        started,
        _progress(),
    )
    _exported(store)
    _exit(NO_CHANGES if _reported(current) else ERROR)


def _revision(given: str | None) -> str | None:
    """`--revision` as apply takes it: a commit's sha (lowercase hex), refused otherwise."""
    import re

    from remit.core.errors import AppError
    from remit.resources.workflows import REVISION

    if given is None:
        return None
    sha = given.strip().lower()
    if not re.fullmatch(REVISION, sha):
        raise AppError(
            f"--revision {given!r} is not a commit: give its sha, 7 to 64 hexadecimal digits "
            "(`git rev-parse main` prints it)"
        )
    return sha


def _progress() -> Callable[["Worker", "Run"], None]:
    """What an apply run served here prints as it goes: each resource it created, updated or
    deleted, once."""
    shown: set[str] = set()

    def progress(running: "Worker", run: "Run") -> None:
        for row in running.remit.calls.ledger(run.run_id):
            verb = row.op_id.rsplit(".", 1)[1]
            if row.status != "ok" or verb not in ("create", "update", "delete"):
                continue
            if row.idempotency_key in shown:
                continue
            shown.add(row.idempotency_key)
            output: dict[str, Any] = row.output if isinstance(row.output, dict) else {}
            err.print(f"  {verb}d {row.op_id.rsplit('.', 1)[0]} {output.get('id', '')}")

    return progress


def _reported(current: "Run") -> bool:
    """Print how the apply run `current` ended; True if it applied its plan."""
    result = current.output if isinstance(current.output, dict) else {}
    if current.status == "done" and result.get("outcome") == "applied":
        out.print(f"Applied: {len(result.get('applied', []))} changed. remit.lock is up to date.")
        return True
    if current.status == "done":
        out.print(f"Nothing applied: the approval was {result.get('outcome')}.")
    elif current.finished:
        out.print(f"Apply {current.status}: {current.error}")
    else:
        out.print(
            f"Apply {current.run_id} is still {current.status}; a worker carries it on "
            f"(`remit show {current.run_id}`)"
        )
    return False


def serve_run_here(
    app: "App",
    settings: "Settings",
    name: str,
    payload: Any,
    actor: str,
    timeout: float,
    started: Any,
    progress: Any,
    carry_on: str | None = None,
) -> "Run":
    from remit.cli.serving import serve_run

    return serve_run(
        app,
        settings,
        name,
        payload,
        by=actor,
        timeout=timeout,
        started=started,
        progress=progress,
        carry_on=carry_on,
    )


@cli.command()
def drift(
    as_: ActAs = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pass.")] = 600.0,
    app_dir: AppDir = None,
) -> None:
    """Compare the vendors with the data files as the built-in run `drift` (what the app's
    drift schedule runs), and record a finding the first time a difference is seen.

    Exits 0 when they match, 2 when something differs, 1 on an error."""
    from remit.resources.planner import Plan
    from remit.resources.workflows import DRIFT

    here_only("drift")
    app, settings = load(app_dir)
    _resources(app)
    current = serve_run_here(
        app,
        settings,
        DRIFT,
        {},
        as_ or settings.actor,
        timeout,
        lambda run: None,
        lambda w, r: None,
    )
    result = current.output if isinstance(current.output, dict) else {}
    if current.status != "done":
        err.print(f"drift run {current.run_id} is {current.status}: {current.error or ''}")
        _exit(ERROR)
    the_plan = Plan.from_json(result.get("plan") or {})
    if not the_plan.has_changes:
        out.print(the_plan.summary())
        _exit(NO_CHANGES)
    out.print(Text(the_plan.render()))
    finding = result.get("finding") or {}
    if finding.get("opened"):
        out.print(f"Drift found: opened finding {finding.get('finding')}.")
    else:
        out.print(f"Drift found, as finding {finding.get('finding')} already says.")
    _exit(CHANGES)


@cli.command(name="import")
def import_(
    type_id: Annotated[
        str, typer.Argument(metavar="TYPE", help="The resource type, e.g. dns.record.")
    ],
    vendor_id: Annotated[str, typer.Argument(help="The vendor's id of the existing object.")],
    name: Annotated[
        str, typer.Option("--as", help="The declaration in resources/*.py to bind it to.")
    ],
    app_dir: AppDir = None,
) -> None:
    """Bind an object that already exists at the vendor to a declaration, in remit.lock,
    then show what apply would change to make it match the data file. It reads the vendor as
    REMIT_ACTOR; it changes nothing there."""
    from remit.core.errors import AppError
    from remit.resources.lockfile import Binding

    here_only("import")
    app, settings = load(app_dir)
    resources = _resources(app)
    rtype = resources.types.get(type_id)
    if rtype is None:
        known = ", ".join(sorted(resources.types)) or "none"
        raise AppError(
            f"no connector of the app declares the resource type `{type_id}` (types: {known})"
        )
    declaration = resources.declared.by_name.get(name)
    if declaration is None:
        raise AppError(
            f"no data file declares `{name}`: declare it in resources/*.py first, e.g. "
            f"`{name} = {rtype.id.split('.')[1]}(...)`, then import"
        )
    if declaration.type is not rtype:
        raise AppError(f"`{name}` is declared a {declaration.type.id}, not a {type_id}")
    call, store = _session(app, settings, settings.actor)
    bindings = store.read()
    for other, held in bindings.items():
        if other != name and held.type == rtype.id and held.id == vendor_id:
            raise AppError(
                f"{type_id} {vendor_id} is bound to `{other}` already: one object is one "
                f"declaration's (remove `{other}`'s binding from remit.lock to move it)"
            )
    bound = bindings.get(name)
    if bound is not None and bound.id != vendor_id:
        raise AppError(
            f"`{name}` is bound to {bound.id} already: remove its binding from remit.lock "
            "first if it should be bound to another object"
        )
    found = call(rtype.ops["import"], {"id": vendor_id}, f"import:{name}")
    store.bind(name, Binding(type=rtype.id, id=vendor_id), by=settings.actor)
    out.print(f"imported {type_id} {getattr(found, 'id', vendor_id)} as `{name}` into remit.lock")
    the_plan = resources.plan(call, store.read())
    mine = [c for c in the_plan.changes if c.name == name]
    if mine and mine[0].action != "none":
        from remit.resources.planner import Plan

        out.print(Text(Plan(changes=tuple(mine)).render()))
    else:
        out.print(f"`{name}` matches its declaration.")
    _exit(NO_CHANGES)


# What `remit resources` says of a declared person or group.
LOCAL_STATE = "declared (local: remit holds it, nothing to make)"


@dataclass(frozen=True)
class ResourceRow:
    """A resource as `remit resources` lists it: `bound_to` is its id at the vendor (None:
    not made yet, or `local`), `state` whether it is up to date or what apply would do.
    `local` is a declaration remit holds itself (a person, a group): no vendor makes it."""

    name: str
    type: str
    bound_to: str | None
    state: str
    local: bool = False


@cli.command(name="resources")
def list_resources(
    offline: Annotated[
        bool, typer.Option("--offline", help="Only the files and remit.lock: ask no vendor.")
    ] = False,
    declared_only: Annotated[
        bool,
        typer.Option(
            "--declared",
            help="Print the data files' declarations as JSON (their markers as JSON too) "
            "and nothing else: read from the folder only, no database or vendor.",
        ),
    ] = False,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List the declared resources: each one's type, binding and state (up to date, or what
    apply would do), and bindings whose declarations are gone."""
    here_only("resources")
    if declared_only:
        _print_declared(app_dir)
        return
    from remit.resources.people import is_local

    app, settings = load(app_dir)
    resources = _resources(app)
    call, store = _session(app, settings, settings.actor)
    bindings = store.read()
    _told_apart(store)
    actions: dict[str, str] = {}
    if not offline:
        for change in resources.plan(call, bindings).changes:
            actions[change.name] = (
                "up to date" if change.action == "none" else f"{change.action} pending"
            )
    listed: list[ResourceRow] = []
    names = [*resources.declared.order, *sorted(set(bindings) - set(resources.declared.by_name))]
    for name in names:
        declared = resources.declared.by_name.get(name)
        bound = bindings.get(name)
        type_id = declared.type.id if declared else (bound.type if bound else "")
        state = actions.get(name, "not read" if offline else "")
        local = declared is not None and is_local(declared.type)
        if local:
            state = LOCAL_STATE
        elif declared is None:
            state = f"removed from the files; {state}"
        listed.append(ResourceRow(name, type_id, bound.id if bound else None, state, local))
    if as_json:
        print_json(listed)
        return
    table = PlainTable("NAME", "TYPE", "BOUND TO", "STATE")
    for row in listed:
        unbound = "(local)" if row.local else "(not made)"
        table.add_row(row.name, row.type, row.bound_to or unbound, row.state)
    out.print(table)


def _print_declared(app_dir: "AppDir") -> None:
    """`remit resources --declared`: `{"declarations": {name: {"type", "fields"}}}`, as apply
    reads the data files, for reading them at another commit (in a worktree of it)."""
    from remit.app import load_app
    from remit.cli.base import app_folder_of

    app = load_app(app_folder_of(app_dir))
    found = {} if app.resources is None else app.resources.declared.as_json()
    print_json({"declarations": found})
