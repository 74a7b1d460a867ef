"""`remit.Client`: acting on an app from code, in any process, with no worker running there.

    from remit import Client

    with Client.connect("examples/acme", by="user:ann") as client:
        run = client.runs.start("ar.chase-invoice", {"invoice_id": "inv_1001"})
        print(run.wait(timeout=60).status)

The client is a small root with a room for each thing it acts on, each built once:

- `client.runs`: start, get, list, handle, steps, attempts, record, cancel, retry;
- `client.approvals`: list, get, decidable, decide, withdraw, audit;
- `client.tasks`: list, get, resolve, audit;
- `client.records`: a business record's activity, and archiving it;
- `client.calls`: an op called directly, a data collection's verbs, the ledger;
- `client.budgets`: periods, set;
- `client.secrets`: list, set, delete;
- `client.tokens`: create, list, revoke, authenticate;
- `client.sessions`: the web console's sign-in links, passwords and sessions;
- `client.resources`: what the declared resources are bound to;
- `client.ops`: pause, resume, reconcile, deploy check, deadlines, workers, denials, audit;
- `client.schedules`: the scheduled workflows (list, get), pause and resume one.

Each room lives in its feature's package (`remit.ops.runs`, `remit.people.rooms`, ...). Its
verbs are the ones the command line has, with the same rules: the policies, the audit, the keys
that make them idempotent. Who acts is `by=` on each verb, else the client's own `by` (default
`REMIT_ACTOR`, or `user:<login>`). The stores and services the rooms act through are
`client.services`, built once (and again after `close`).

Inside a workflow a client verb is refused: a run acts through its `ctx`, whose steps are
checkpointed, and a client call from there would run again on every replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from remit.core import limits
from remit.core.acting import not_in_a_workflow
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.principals import check_actor
from remit.core.settings import Settings, app_folder

if TYPE_CHECKING:
    import sqlalchemy as sa
    from dbos import DBOSClient

    from remit.app import App
    from remit.budgets.rooms import BudgetsRoom
    from remit.budgets.store import Budgets
    from remit.connectors.base import Implementation
    from remit.connectors.credentials import Secrets
    from remit.connectors.rooms import SecretsRoom
    from remit.core.runs import RunStore
    from remit.execution.direct import DirectCalls
    from remit.execution.rooms import CallsRoom
    from remit.ops.changes import ChangesRoom
    from remit.ops.messages import Messages, Sent
    from remit.ops.pause import AppState
    from remit.ops.retries import Retries
    from remit.ops.rooms import OpsRoom
    from remit.ops.runs import RunsRoom
    from remit.ops.schedules import SchedulesRoom
    from remit.people.approvals import Approvals
    from remit.people.rooms import ApprovalsRoom, RecordsRoom, TasksRoom
    from remit.people.tasks import Tasks
    from remit.policy.guard import Guard
    from remit.policy.rooms import SessionsRoom, TokensRoom
    from remit.policy.signin import SignIns
    from remit.policy.tokens import Tokens
    from remit.resources.rooms import ResourcesRoom


IdKind = Literal["run", "approval", "task"]

_log = logging.getLogger("remit.client")


def _not_woken(message: str) -> None:
    _log.warning("%s", message)


class Client:
    """An app's runs, approvals, tasks, ledger, budgets, secrets and controls, from code, one
    room each (see the module's docstring).

    Made by `Client.connect`; close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        app: App | Path,
        settings: Settings,
        *,
        by: str | None = None,
        clock: Clock | None = None,
        implementations: Mapping[str, Implementation] | None = None,
        environ: Mapping[str, str] | None = None,
        pool_size: int = 4,
        prepare: bool = True,
    ) -> None:
        # An app's folder is loaded (its workflows and connectors imported) when a verb first
        # needs the app: reading runs, the ledger or deadlines does not.
        if isinstance(app, Path):
            self._folder = app_folder(app)
        else:
            self.app = app
        self.settings = settings
        limits.use(limits.Limits.of(settings))
        self.by = check_actor(settings.actor if by is None else by, where="by")
        self.clock = clock or SystemClock()
        # What direct calls are made on (default: each connector's driver, or its fake with
        # REMIT_FAKES), and the environment drivers see.
        self.implementations = implementations
        self.environ = environ
        self.db = Database.of(settings, pool_size=pool_size)
        if prepare:
            self.db.prepare()
        # The stores and services the rooms act through (the rooms are built on first use).
        self.services = Services(self)
        # Called after each write that gives a worker something to do: a start, a retry, a
        # decision, a task's answer, a held direct call, a resume of the app, an archive, a
        # reconciler pass that acted. By default, with a wakeup service configured, it wakes
        # the app's worker if it stopped itself when idle (`remit serve --worker
        # --stop-when-idle` points it at its own worker instead; a command always looks, to
        # say when it cannot wake it).
        self.on_write: Callable[[], object] | None = (
            (lambda: self.ops.wake_if_stopped()) if settings.wakeup_url is not None else None
        )
        # Told, when a write finds the worker stopped and cannot wake it: by default a warning
        # in the log (the write is done); the command line makes it an error.
        self.on_not_woken: Callable[[str], object] = _not_woken

    def use_implementations(self, implementations: Mapping[str, Implementation]) -> None:
        """Make direct calls on `implementations` (by vendor) from now on."""
        self.implementations = dict(implementations)
        self.services.__dict__.pop("direct", None)

    @classmethod
    def connect(
        cls,
        app: App | str | Path,
        database_url: str | None = None,
        *,
        by: str | None = None,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Client:
        """Connect to an app's database: `app` is an `App` or its folder (loaded as `remit`
        loads it, with its policies). The database is `database_url`, else `REMIT_DATABASE_URL`,
        else the app folder's SQLite file; other settings come from the environment."""
        not_in_a_workflow("connect")
        given = Path(app) if isinstance(app, str | Path) else app
        folder = given if isinstance(given, Path) else Path(".")
        env = dict(environ) if environ is not None else None
        settings = Settings.from_env(folder, environ=env)
        if database_url is not None:
            settings = replace(settings, database_url=database_url)
        return cls(given, settings, by=by, clock=clock)

    def close(self) -> None:
        """Release every connection the client holds: its DBOS client's and its database's.

        A client closed and then used again opens them again, with its services built anew.
        """
        dbos = self.services.__dict__.get("dbos")
        if dbos is not None:
            dbos.destroy()
        self.services = Services(self)
        self.db.dispose()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @cached_property
    def app(self) -> App:
        """The app, loaded from its folder on first use (as `remit` loads it, with its
        policies) when the client was given the folder."""
        from remit.app import load_app

        return load_app(self._folder)

    # The rooms, each built on first use (a command imports only the room it uses).

    @cached_property
    def runs(self) -> RunsRoom:
        """An app's runs: start, get, list, handle, steps, attempts, record, cancel, retry,
        send, state, messages, waiting, children, parent."""
        from remit.ops.runs import RunsRoom

        return RunsRoom(self)

    def send(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent:
        """Send a message to a run on `topic`: `client.runs.send`."""
        return self.runs.send(run_id, topic, payload, key=key, by=by)

    def state(self, run_id: str) -> dict[str, Any]:
        """What a run published (`ctx.publish`), the latest value by key: `client.runs.state`."""
        return self.runs.state(run_id)

    @cached_property
    def changes(self) -> ChangesRoom:
        """Changes to the operations repo: open, list, get, and the hosts' deploys."""
        from remit.ops.changes import ChangesRoom

        return ChangesRoom(self)

    @cached_property
    def approvals(self) -> ApprovalsRoom:
        """The gates runs wait at: list, get, decidable, decide, withdraw, audit."""
        from remit.people.rooms import ApprovalsRoom

        return ApprovalsRoom(self)

    @cached_property
    def tasks(self) -> TasksRoom:
        """Writes whose outcome a person confirms: list, get, resolve, audit."""
        from remit.people.rooms import TasksRoom

        return TasksRoom(self)

    @cached_property
    def records(self) -> RecordsRoom:
        """The business's records: activity, archive."""
        from remit.people.rooms import RecordsRoom

        return RecordsRoom(self)

    @cached_property
    def calls(self) -> CallsRoom:
        """Ops called directly, data collections, and the ledger: call, data, ledger."""
        from remit.execution.rooms import CallsRoom

        return CallsRoom(self)

    @cached_property
    def budgets(self) -> BudgetsRoom:
        """Budget periods: periods, set."""
        from remit.budgets.rooms import BudgetsRoom

        return BudgetsRoom(self)

    @cached_property
    def secrets(self) -> SecretsRoom:
        """Stored credentials: list, set, delete."""
        from remit.connectors.rooms import SecretsRoom

        return SecretsRoom(self)

    @cached_property
    def tokens(self) -> TokensRoom:
        """API tokens: create, list, revoke, authenticate."""
        from remit.policy.rooms import TokensRoom

        return TokensRoom(self)

    @cached_property
    def sessions(self) -> SessionsRoom:
        """The web console's sign-ins: link, set_password, sign-in, principal, sign_out."""
        from remit.policy.rooms import SessionsRoom

        return SessionsRoom(self)

    @cached_property
    def resources(self) -> ResourcesRoom:
        """What declared resources are bound to: bindings."""
        from remit.resources.rooms import ResourcesRoom

        return ResourcesRoom(self)

    @cached_property
    def ops(self) -> OpsRoom:
        """The app as a whole: pause, resume, reconcile, deploy_check, deadlines, workers, denials, audit."""
        from remit.ops.rooms import OpsRoom

        return OpsRoom(self)

    @cached_property
    def schedules(self) -> SchedulesRoom:
        """The app's scheduled workflows: list, get, pause, resume."""
        from remit.ops.schedules import SchedulesRoom

        return SchedulesRoom(self)

    # What the command line reads; a `RemoteClient` answers the same through the HTTP API.

    @property
    def app_name(self) -> str:
        return self.app.name

    def find_id(
        self, kind: IdKind, given: str, *, only: sa.ColumnElement[bool] | None = None
    ) -> str:
        """The whole id of the run, approval or task `given` names, in full or by an
        unambiguous prefix (an unknown one is returned as given, for the lookup to refuse);
        `only`: a prefix matches only rows meeting it (see `remit.reads`)."""
        from remit.core.ids import full_id
        from remit.core.schema import approvals, runs, tasks

        column = {"run": runs.c.run_id, "approval": approvals.c.id, "task": tasks.c.id}[kind]
        return full_id(self.db, column, given, what=kind, only=only)

    # What the rooms ask of their client (`core.acting.Acting`).

    def who(self, by: str | None) -> str:
        """Who acts: `by`, else (when None) the client's own; an empty `by` is no one, refused
        by the services' checks. Each service checks it as it always does."""
        return self.by if by is None else by

    def person(self, by: str | None) -> str:
        """Who acts, for an act only people and agents take: remit's own principals are
        refused (the policies do not check them)."""
        return check_actor(self.who(by), where="by")

    def written(self) -> None:
        if self.on_write is not None:
            self.on_write()


class Services:
    """The stores and services a client's rooms act through, each built on first use: a client
    that only reads runs loads no app and opens no DBOS connection. `Client.close` drops them;
    the client builds them anew when used again."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @cached_property
    def dbos(self) -> DBOSClient:
        """DBOS's client on the app's system database, made on first use. It connects only when
        a verb calls DBOS: a service that only reads (listing approvals, say) opens no connection
        through it."""
        return self._client.db.client(self._client.app_name, lazy=True)

    @cached_property
    def runs(self) -> RunStore:
        from remit.core.runs import RunStore

        return RunStore(self._client.db, clock=self._client.clock)

    @cached_property
    def guard(self) -> Guard:
        from remit.policy.guard import Guard

        return Guard.of(self._client.app, self._client.db, clock=self._client.clock)

    @cached_property
    def approvals(self) -> Approvals:
        from remit.people.approvals import Approvals

        return Approvals(
            self._client.db,
            self.dbos,
            self._client.app.approval_types,
            admins=self._client.settings.admins,
            clock=self._client.clock,
            guard=self.guard,
        )

    @cached_property
    def tasks(self) -> Tasks:
        from remit.people.tasks import Tasks

        return Tasks(
            self._client.db,
            self.dbos,
            self._client.app.name,
            self._client.app.ops,
            clock=self._client.clock,
            guard=self.guard,
        )

    @cached_property
    def messages(self) -> Messages:
        from remit.ops.messages import Messages

        return Messages(self._client.db, self.dbos, clock=self._client.clock)

    @cached_property
    def retries(self) -> Retries:
        from remit.ops.retries import Retries

        return Retries(self._client.db, self.dbos, guard=self.guard, clock=self._client.clock)

    @cached_property
    def budgets(self) -> Budgets:
        from remit.budgets.store import Budgets

        return Budgets(
            self._client.db,
            self._client.app.name,
            self._client.app.budgets,
            clock=self._client.clock,
        )

    @cached_property
    def secrets(self) -> Secrets:
        from remit.connectors.credentials import SecretKey, Secrets

        return Secrets(
            self._client.db, self._client.app.name, SecretKey.from_settings(self._client.settings)
        )

    @cached_property
    def tokens(self) -> Tokens:
        from remit.policy.tokens import Tokens

        return Tokens(self._client.db, self._client.app.name, clock=self._client.clock)

    @cached_property
    def signins(self) -> SignIns:
        from remit.policy.signin import SignIns

        return SignIns(self._client.db, self._client.app.name, clock=self._client.clock)

    @cached_property
    def app_state(self) -> AppState:
        from remit.ops.pause import AppState

        return AppState(
            self._client.db,
            self.dbos,
            self._client.app,
            poll_interval=self._client.settings.poll_interval,
            clock=self._client.clock,
        )

    @cached_property
    def direct(self) -> DirectCalls:
        from remit.execution.direct import DirectCalls
        from remit.ops.runtime import implementations_for

        implementations, credentials = implementations_for(
            self._client.app,
            self._client.db,
            self._client.settings,
            implementations=self._client.implementations,
            environ=self._client.environ,
            clock=self._client.clock,
        )
        return DirectCalls(
            self._client.app,
            self._client.db,
            self.dbos,
            implementations=implementations,
            environ=credentials,
            guard=self.guard,
            clock=self._client.clock,
            op_timeout=self._client.settings.op_timeout,
        )
