"""An app: its workflows, connectors and queues, checked as a whole when it loads."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import dis
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Protocol, TypeVar

from remit._version import __version__
from remit.budgets.model import Budget
from remit.changes.ops import OPS as REPO_OPS
from remit.changes.ops import Forge, find_forge, repo_ops, repo_url
from remit.changes.sources import files_reader, resolver
from remit.changes.workflow import (
    CHANGE,
    REVIEW,
    ROLLBACK,
    change_approval_types,
    change_workflow,
)
from remit.connectors.apps import VENDOR as APPS_VENDOR
from remit.connectors.apps import AppEntry, AppList, apps_connector, is_apps_connector
from remit.connectors.base import Connector
from remit.connectors.data import VENDOR as DATA_VENDOR
from remit.connectors.data import Collection
from remit.connectors.llm import DEFAULT_PRICES, chat_complete
from remit.connectors.wakeup import VENDOR as WAKEUP_VENDOR
from remit.connectors.wakeup import wakeup_connector
from remit.core.errors import AppError, UnknownWorkflow
from remit.core.settings import app_folder
from remit.declare.apps import (
    APPS_FOLDER,
    app_of_name,
    caller_app,
    check_app_name,
    qualified,
    register_repo,
)
from remit.declare.costs import Price
from remit.declare.ops import Op
from remit.declare.schedules import Schedule
from remit.declare.workflows import DEFAULT_QUEUE, Workflow, check_name, check_qualified
from remit.execution.direct import held_call_type, held_call_workflow
from remit.people.approvals import ApprovalType
from remit.people.notify import Notifier
from remit.policy.cedar import HELD, Catalog, Policy
from remit.resources import files as resource_files
from remit.resources.lockfile import FILE as LOCKFILE
from remit.resources.lockfile import Lockfile
from remit.resources.people import declared_people
from remit.resources.workflows import (
    APPLY,
    APPROVAL,
    DRIFT,
    Resources,
    apply_workflow,
    approval_type,
    drift_workflow,
)

ENTRY_MODULE = "app"
POLICIES_FOLDER = "policies"

T = TypeVar("T")


@dataclass(frozen=True)
class Queue:
    """A queue the app's workflows run on.

    `concurrency` bounds the runs in flight across every worker, `worker_concurrency` those on
    one worker, and `rate=(n, seconds)` the runs started in any window of that many seconds.
    None leaves a bound off. The bounds hold across every worker on the database.
    """

    name: str
    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate: tuple[int, float] | None = None

    def __post_init__(self) -> None:
        # Declared in an app's folder (`apps/<app>/`), the queue is that app's: `<app>.<name>`.
        app = caller_app(3)
        if app is not None and "." not in self.name:
            check_name("queue", self.name)
            object.__setattr__(self, "name", qualified(app, self.name))
        check_qualified("queue", self.name)
        if self.rate is not None:
            limit, period = self.rate
            if limit < 1 or period <= 0:
                raise AppError(
                    f"queue `{self.name}`: rate={self.rate!r} must be (runs, seconds) with at "
                    "least 1 run in a period over 0 seconds, e.g. rate=(10, 60.0)"
                )
        for what, value in (
            ("concurrency", self.concurrency),
            ("worker_concurrency", self.worker_concurrency),
        ):
            if value is not None and value < 1:
                raise AppError(f"queue `{self.name}`: {what} must be 1 or more, or None")


class OperatorAgentSpec(Protocol):
    """What an app needs of its operator agent (`remit.agent.OperatorAgent`): the built-in
    workflow its chats' turns run as."""

    model: str

    def workflow(self, app: App) -> Workflow: ...


class App:
    """The workflows, connectors, collections and queues of one app, checked together.

    Raises `AppError` naming what to change: two workflows with one name, an op used that no
    connector or collection declares, a queue no one declared, two connectors for one vendor,
    two collections with one name, a connector for the vendor `data` beside collections, one
    of its own for the vendor `wakeup` (remit's: every app has `wakeup_connector`, through
    which an instance registers with the wakeup service), a budget for a workflow the app does
    not define or two for one scope and period, a price that is not one.

    `repo` is the URL of the operations repo at its forge (`REMIT_REPO_URL` overrides it; with
    neither, the app folder's git `origin`): a connector's remote that serves it is the app's
    forge, and the app has the built-in `change` (README, "Changes").

    `drift_schedule` (a cron expression in UTC, or `schedule(...)`) runs the built-in `drift`
    on that schedule, for an app that declares resources (`resources/`, see `use_resources`).

    `budgets` limit what calls of ops with a cost (`ctx.llm`) may spend per period
    (`budgets.py`); `llm_prices` adds models to remit's price table, or changes their prices
    (USD per million tokens: `{"my-model": Price(input="0.50", output="1.50")}`).
    """

    def __init__(
        self,
        *,
        name: str,
        workflows: Iterable[Workflow],
        connectors: Iterable[Connector] = (),
        queues: Iterable[Queue] = (),
        approvals: Iterable[ApprovalType] = (),
        notifiers: Iterable[Notifier] | None = None,
        collections: Iterable[Collection[Any]] = (),
        policies: Path | str | None = None,
        budgets: Iterable[Budget] = (),
        llm_prices: Mapping[str, Price | tuple[Any, Any]] | None = None,
        drift_schedule: str | Schedule | None = None,
        repo: str | None = None,
        agent: OperatorAgentSpec | None = None,
    ) -> None:
        check_name("app", name)
        self.name = name
        # The operator agent (`remit.agent.OperatorAgent`), whose built-in workflow `chat` the
        # app then has.
        self.agent = agent
        # The URL of the operations repo at its forge; REMIT_REPO_URL overrides it, and without
        # either it is the app folder's `origin` (`changes/ops.py`).
        self.repo = repo
        self.drift_schedule = drift_schedule
        self.resources: Resources | None = None
        self._policies_folder: Path | None = None
        self.approval_types: dict[str, ApprovalType] = {}
        for declared in approvals:
            if not isinstance(declared, ApprovalType):
                raise AppError(
                    f"app `{name}` lists {declared!r} among its approvals: use "
                    "ApprovalType(name, draft=YourModel)"
                )
            if declared.name in self.approval_types:
                raise AppError(f"app `{name}` declares the approval type `{declared.name}` twice")
            self.approval_types[declared.name] = declared
        # None: the worker's defaults from settings (the log, and a webhook if one is set).
        self.notifiers = None if notifiers is None else list(notifiers)
        if self.notifiers is not None:
            names = [notifier.name for notifier in self.notifiers]
            if len(set(names)) != len(names):
                raise AppError(f"app `{name}` has two notifiers with one name: {sorted(names)}")
        self.connectors: dict[str, Connector] = {}
        for connector in connectors:
            if not isinstance(connector, Connector):
                raise AppError(f"app `{name}` lists {connector!r} among its connectors")
            if connector is wakeup_connector or is_apps_connector(connector):
                continue  # every app has it (its own `remit.apps.list`, listing this app)
            if connector.vendor in (WAKEUP_VENDOR, APPS_VENDOR):
                raise AppError(
                    f"app `{name}` declares a connector for the vendor `{connector.vendor}`, "
                    f"which is remit's own vendor (its connector is in every app): rename "
                    f"yours, and its ops' ids"
                )
            if connector.vendor in self.connectors:
                raise AppError(
                    f"app `{name}` has two connectors for the vendor `{connector.vendor}`: keep one"
                )
            self.connectors[connector.vendor] = connector
        self.connectors[WAKEUP_VENDOR] = wakeup_connector
        # The folder `load_app` loaded the app from, and its forge once asked for (`forge`).
        self.folder: Path | None = None
        # Whether the forge is reached on its fake, as the app's connectors are (set where
        # the implementations are chosen, `ops/runtime.py`).
        self.forge_on_fakes = False
        self._forge: tuple[Forge | None] | None = None
        # With a forge remote, remit's own connector also has the repo's ops.
        self.connectors[APPS_VENDOR] = apps_connector(
            self.listing,
            REPO_OPS if self.remotes else (),
            lambda fakes: repo_ops(self.forge, fakes=fakes),
        )
        self.resource_types = resource_files.types_of(self.connectors.values())
        self.collections = _collections(name, collections, self.connectors)
        self.ops: dict[str, Op[Any, Any]] = {
            declared.id: declared
            for ops in [
                *(connector.ops for connector in self.connectors.values()),
                *(held.ops for held in self.collections.values()),
            ]
            for declared in ops
        }
        self.queues: dict[str, Queue] = {DEFAULT_QUEUE: Queue(DEFAULT_QUEUE)}
        # The queues remit made because no one declared them (`default`, an app's
        # `<app>.default`): a declaration of one replaces it, in whatever order it comes.
        self._made_queues = {DEFAULT_QUEUE}
        for queue in queues:
            if queue.name in self.queues and queue.name != DEFAULT_QUEUE:
                raise AppError(f"app `{name}` declares the queue `{queue.name}` twice: keep one")
            self.queues[queue.name] = queue
            self._made_queues.discard(queue.name)
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            self._add(wf)
        if self.remotes:
            self._use_changes()
        if agent is not None:
            self._use_agent(agent)
        self._declared_budgets = list(budgets)
        # A budget may name an app's workflow (`ar.chase`) that `load_app` adds later: those
        # are checked when it does (`include`).
        self.budgets = _budgets(name, self._declared_budgets, self.workflows, strict=False)
        self.llm_prices = _prices(name, llm_prices)
        # Open (nothing checked) until the app has a policies folder: `policies=`, or the app
        # folder's `policies/` (`load_app`).
        self.policy = Policy.open()
        if policies is not None:
            self.use_policies(Path(policies))

    def include(
        self,
        *,
        workflows: Iterable[Workflow] = (),
        collections: Iterable[Collection[Any]] = (),
        queues: Iterable[Queue] = (),
        approvals: Iterable[ApprovalType] = (),
        budgets: Iterable[Budget] = (),
    ) -> None:
        """Add what the repo's folders declare beside `App(...)`: the root's `workflows/` and
        each app's `apps/<app>/workflows/` (`load_app` finds them). Checked as `App(...)` checks
        its own; the policies, if the app has them, are loaded again to know the new names."""
        # Checked with the app's own as `App(collections=...)` checks them; one listed again
        # (imported by two modules) is the same one.
        self.collections = _collections(
            self.name, _unique([*self.collections.values(), *collections]), self.connectors
        )
        for held in self.collections.values():
            self.ops.update({declared.id: declared for declared in held.ops})
        for queue in queues:
            known = self.queues.get(queue.name)
            if known is not None and known != queue and queue.name not in self._made_queues:
                raise AppError(
                    f"app `{self.name}` declares the queue `{queue.name}` twice: keep one"
                )
            self.queues[queue.name] = queue
            self._made_queues.discard(queue.name)
        for declared in approvals:
            known_type = self.approval_types.get(declared.name)
            if known_type is not None and known_type is not declared:
                raise AppError(
                    f"app `{self.name}` declares the approval type `{declared.name}` twice: "
                    "rename one"
                )
            self.approval_types[declared.name] = declared
        for wf in workflows:
            if self.workflows.get(wf.name) is not wf:
                self._add(wf)
        self._declared_budgets += [b for b in budgets if b not in self._declared_budgets]
        self.budgets = _budgets(self.name, self._declared_budgets, self.workflows)
        if self.policy.enabled and self._policies_folder is not None:
            del self.workflows[HELD], self.approval_types[HELD]
            self.use_policies(self._policies_folder)

    @property
    def apps(self) -> dict[str, list[str]]:
        """Each app of the repo (`apps/<app>/`) with its workflows' names, sorted."""
        found: dict[str, list[str]] = {}
        for name in sorted(self.workflows):
            app = self.workflows[name].app
            if app is not None:
                found.setdefault(app, []).append(name)
        return dict(sorted(found.items()))

    @property
    def remotes(self) -> dict[str, Connector]:
        """The connectors with a forge half (`Connector(..., remote=...)`), by vendor."""
        return {v: c for v, c in self.connectors.items() if c.remote is not None}

    def forge(self) -> Forge | None:
        """The forge serving the app's repo (`changes/ops.py`): None when no connector has a
        remote; refused, saying what to set, when the repo's URL is unknown or no remote
        serves it. Found once, on first use."""
        if self._forge is None:
            if not self.remotes:
                return None
            url = repo_url(self.folder, default=self.repo)
            self._forge = (find_forge(self.remotes.values(), url),)
        return self._forge[0]

    def listing(self) -> AppList:
        """What `remit.apps.list` answers: the root's workflows and each app's."""
        entries = [
            AppEntry(
                name=app,
                workflows=names,
                collections=sorted(c for c in self.collections if app_of_name(c) == app),
                queues=sorted(q for q in self.queues if app_of_name(q) == app),
            )
            for app, names in self.apps.items()
        ]
        root = sorted(name for name, wf in self.workflows.items() if wf.app is None)
        return AppList(repo=self.name, workflows=root, apps=entries)

    def use_policies(self, folder: Path) -> None:
        """Govern the app by the Cedar policies in `folder` (see `policy/cedar.py`).

        Adds the built-in workflow and approval type `call`, which a call held by a policy
        waits in. A policy set that does not parse or validate refuses every action.
        """
        if not folder.is_dir():
            raise AppError(f"policies={str(folder)!r}: no such folder of *.cedar files")
        self._policies_folder = folder
        for taken, kind in ((self.workflows, "workflow"), (self.approval_types, "approval type")):
            if HELD in taken and not self.policy.enabled:
                raise AppError(
                    f"app `{self.name}` declares a {kind} named `{HELD}`, the name of the "
                    "built-in one a policy's held calls wait in: rename yours"
                )
        self.approval_types[HELD] = held_call_type(self.ops)
        self.workflows[HELD] = held_call_workflow(dict(self.ops))
        catalog = Catalog(
            workflows={name: wf.input for name, wf in self.workflows.items()},
            ops={op_id: (op.input, op.effect, op.idempotent) for op_id, op in self.ops.items()},
            approval_types={name: t.draft for name, t in self.approval_types.items()},
            own_ops=frozenset(op.id for op in wakeup_connector.ops),
            **declared_people(self.resources),
        )
        self.policy = Policy.load(folder, catalog)

    def use_resources(
        self,
        folder: Path | str | None = None,
        *,
        package: str | None = None,
        declarations: Mapping[str, Any] | None = None,
        lockfile: Path | str | None = None,
    ) -> None:
        """Declare the app's resources: those in `folder/resources/*.py` (imported as
        `<package>.resources.<file>`), or `declarations` by name; bound in `lockfile` (default
        `folder/remit.lock`). Adds the built-in workflows `apply` and `drift` and the approval
        type `apply` (see `resources/workflows.py`)."""
        for taken, kind in ((self.workflows, "workflow"), (self.approval_types, "approval type")):
            for builtin in (APPLY, DRIFT) if kind == "workflow" else (APPROVAL,):
                if builtin in taken and self.resources is None:
                    raise AppError(
                        f"app `{self.name}` declares a {kind} named `{builtin}`, the name of "
                        "remit's built-in one for declared resources: rename yours"
                    )
        if declarations is not None:
            declared = resource_files.Declared.of(declarations, self.resource_types)
        elif folder is not None:
            declared = resource_files.load(
                Path(folder), package or Path(folder).name, self.resource_types
            )
        else:
            raise AppError("use_resources needs the app's folder or its declarations")
        if lockfile is None:
            if folder is None:
                raise AppError("use_resources needs the lockfile's path with declarations")
            lockfile = Path(folder) / LOCKFILE
        self.resources = Resources(self.resource_types, declared, Lockfile(lockfile), self.name)
        if self.remotes:
            # The forge's repo: a revision's data files, and `source()` resolved there.
            self.resources = dataclasses.replace(
                self.resources, resolve_source=resolver(self), read_at=files_reader(self)
            )
        self.workflows[APPLY] = apply_workflow(self.resources, self.ops)
        self.workflows[DRIFT] = drift_workflow(self.resources, self.ops, self.drift_schedule)
        self.approval_types[APPROVAL] = approval_type()
        if self.policy.enabled and self._policies_folder is not None:
            del self.workflows[HELD], self.approval_types[HELD]
            self.use_policies(self._policies_folder)
        elif not self.policy.enabled:
            # No policies check anything, yet a gate assigned to a declared group is decided
            # by its members.
            self.policy = Policy.open(declared_people(self.resources)["declared_groups"])

    def _use_changes(self) -> None:
        """Add the built-in workflow `change` and its approval types (`changes/workflow.py`),
        for an app with a forge remote."""
        for builtin, taken, kind in (
            (CHANGE, self.workflows, "workflow"),
            (REVIEW, self.approval_types, "approval type"),
            (ROLLBACK, self.approval_types, "approval type"),
        ):
            if builtin in taken:
                raise AppError(
                    f"app `{self.name}` declares a {kind} named `{builtin}`, the name of remit's "
                    "built-in one for changes to the repo: rename yours"
                )
        self.workflows[CHANGE] = change_workflow(self)
        for declared in change_approval_types():
            self.approval_types[declared.name] = declared

    def _use_agent(self, agent: OperatorAgentSpec) -> None:
        """Add the operator agent's built-in workflow `chat`: it asks models through the `llm`
        connector, which the app must list."""
        if "llm.chat.complete" not in self.ops:
            raise AppError(
                f"app `{self.name}` has an operator agent but no `llm` connector, through which "
                "it asks its model: add it, App(connectors=[llm, ...]) (`from remit import llm`)"
            )
        chat = agent.workflow(self)
        if chat.name in self.workflows:
            raise AppError(
                f"app `{self.name}` declares a workflow named `{chat.name}`, the name of remit's "
                "built-in one for the operator agent's turns: rename yours"
            )
        self.workflows[chat.name] = chat

    def with_policies(self, folder: Path | str) -> App:
        """A copy of this app governed by the Cedar policies in `folder`; this app is left as
        it is (what a test under other policies opens its harness on)."""
        governed = copy.copy(self)
        governed.workflows = dict(self.workflows)
        governed.approval_types = dict(self.approval_types)
        if self.policy.enabled:
            # The built-in workflow and approval type the policies added come again.
            del governed.workflows[HELD], governed.approval_types[HELD]
        governed.policy = Policy.open()
        governed.use_policies(Path(folder))
        return governed

    def _add(self, wf: Workflow) -> None:
        if not isinstance(wf, Workflow):
            raise AppError(
                f"app `{self.name}` lists {wf!r} among its workflows: decorate it with "
                "`@workflow(name=..., input=...)`"
            )
        if wf.name in self.workflows:
            raise AppError(
                f"app `{self.name}` has two workflows named `{wf.name}` "
                f"({_where(self.workflows[wf.name])} and {_where(wf)}): rename one"
            )
        for used in wf.uses:
            declared = self.ops.get(used.id)
            collected = used.vendor == DATA_VENDOR and DATA_VENDOR not in self.connectors
            if declared is None and collected:
                raise AppError(
                    f"workflow `{wf.name}` uses `{used.id}`, which no collection in the app "
                    f"declares: add the `{used.resource}` collection to `App(collections=...)`"
                )
            if declared is None:
                raise AppError(
                    f"workflow `{wf.name}` uses `{used.id}`, which no connector in the app "
                    f"declares: add the {used.vendor} connector to `App(connectors=...)`"
                )
            if declared is not used and collected:
                raise AppError(
                    f"workflow `{wf.name}` uses an op `{used.id}` of another `{used.resource}` "
                    "collection than the app's: use the ops of the collection in "
                    "`App(collections=...)`"
                )
            if declared is not used:
                raise AppError(
                    f"workflow `{wf.name}` uses an op `{used.id}` that is not the one the "
                    f"{used.vendor} connector declares: import the op from the connector"
                )
        for used in wf.uses:
            if used.acts_on_the_repo:
                raise AppError(
                    f"workflow `{wf.name}` uses `{used.id}`, which acts on the operations repo "
                    "at its forge: only remit's built-in `change` calls it. Open a change "
                    "instead (`remit change open BRANCH`)"
                )
            for rtype in self.resource_types.values():
                if rtype.change_op(used.id):
                    raise AppError(
                        f"workflow `{wf.name}` uses `{used.id}`, which changes a declared "
                        f"{rtype.id}: only remit's built-in `apply` calls it. Change the data "
                        "file instead (resources/*.py), then `remit plan` and `remit apply`"
                    )
        unlisted = sorted(referenced_ops(wf.fn, self.ops) - wf.op_ids)
        if unlisted:
            listed = ", ".join(f"`{op_id}`" for op_id in unlisted)
            raise AppError(
                f"workflow `{wf.name}` calls {listed}, which its `uses` does not list: add "
                f"{'it' if len(unlisted) == 1 else 'them'} to @workflow(uses=[...])"
            )
        own_default = wf.app is not None and wf.queue == qualified(wf.app, DEFAULT_QUEUE)
        if own_default and wf.queue not in self.queues:
            # Each app has a default queue of its own, `<app>.default`.
            self.queues[wf.queue] = Queue(wf.queue)
            self._made_queues.add(wf.queue)
        if wf.queue not in self.queues:
            raise AppError(
                f"workflow `{wf.name}` runs on queue `{wf.queue}`, which the app does not "
                f"declare: add `Queue({wf.queue!r})` to `App(queues=...)`"
            )
        self.workflows[wf.name] = wf

    def workflow(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise UnknownWorkflow(
                f"app `{self.name}` has no workflow `{name}` (it has: {known})"
            ) from None

    @property
    def version(self) -> str:
        """The application version: a hash of remit's version and every workflow's code.

        Any edit to a workflow function (or its name, queue or ops) gives a new version; an
        edit elsewhere in the app does not.
        """
        digest = hashlib.sha256(f"remit {__version__}\n".encode())
        for name in sorted(self.workflows):
            wf = self.workflows[name]
            ops = ",".join(sorted(wf.op_ids))
            digest.update(f"{name}\n{wf.queue}\n{ops}\n{wf.source()}\n".encode())
        return digest.hexdigest()[:16]

    def __repr__(self) -> str:
        return f"App({self.name!r}, workflows={sorted(self.workflows)})"


def _budgets(
    app: str, declared: Iterable[Budget], workflows: Mapping[str, Workflow], *, strict: bool = True
) -> tuple[Budget, ...]:
    """The app's budgets, refusing one for a workflow it does not define (unless not `strict`
    and the workflow is an app's, `<app>.<name>`, which `load_app` adds later), or two for one
    scope and kind of period."""
    found: dict[tuple[str, str], Budget] = {}
    for budget in declared:
        if not isinstance(budget, Budget):
            raise AppError(
                f"app `{app}` lists {budget!r} among its budgets: declare each with "
                'remit.Budget(limit_usd, period="month", workflow=None)'
            )
        later = not strict and budget.workflow is not None and "." in budget.workflow
        if budget.workflow is not None and budget.workflow not in workflows and not later:
            known = ", ".join(sorted(workflows)) or "none"
            raise AppError(
                f"app `{app}` has a budget for the workflow `{budget.workflow}`, which it does "
                f"not define (it has: {known}): fix the name, or add the workflow"
            )
        if (budget.scope, budget.period) in found:
            raise AppError(
                f"app `{app}` declares two {budget.period} budgets for `{budget.scope}`: keep one"
            )
        found[budget.scope, budget.period] = budget
    return tuple(found.values())


def _prices(app: str, given: Mapping[str, Price | tuple[Any, Any]] | None) -> dict[str, Price]:
    """remit's price table with the app's additions and changes."""
    prices = dict(DEFAULT_PRICES)
    for model, price in (given or {}).items():
        if not isinstance(model, str) or not model:
            raise AppError(f"app `{app}`: llm_prices has the key {model!r}: use the model's name")
        if isinstance(price, tuple) and len(price) == 2:
            price = Price(*price)
        if not isinstance(price, Price):
            raise AppError(
                f"app `{app}`: llm_prices[{model!r}] is {price!r}: give "
                'Price(input="0.50", output="1.50") in USD per million tokens, or an '
                "(input, output) pair"
            )
        prices[model] = price
    return prices


def _collections(
    app: str, collections: Iterable[Collection[Any]], connectors: Mapping[str, Connector]
) -> dict[str, Collection[Any]]:
    """The app's collections by name, refusing two with one name, or any beside a connector
    for the vendor `data` (whose ops they are)."""
    found: dict[str, Collection[Any]] = {}
    for declared in collections:
        if not isinstance(declared, Collection):
            raise AppError(
                f"app `{app}` lists {declared!r} among its collections: declare each with "
                "remit.collection(name, model=YourModel)"
            )
        if declared.name in found:
            raise AppError(
                f"app `{app}` has two collections named `{declared.name}`: keep one, or "
                "rename the other"
            )
        found[declared.name] = declared
    if found and DATA_VENDOR in connectors:
        raise AppError(
            f"app `{app}` has a connector for the vendor `{DATA_VENDOR}`, whose ops are its "
            f"collections': rename the connector's vendor (and its ops' ids)"
        )
    return found


def referenced_ops(fn: Callable[..., Any], ops: Mapping[str, Op[Any, Any]]) -> set[str]:
    """The ids of the app's ops that `fn`'s own code names: an op object it loads by name, a
    module global or a variable it closes over (`ctx.call(send_message, ...)`), a collection's
    op read off the collection so named (`ctx.call(customers.put, ...)`), an attribute path
    `ctx.<vendor>.<resource>.<op>`, or `ctx.llm(...)` (`llm.chat.complete`).

    Code the function calls into is not read; the run-time check covers it.
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    by_path = {tuple(op_id.split(".")): op_id for op_id in ops}
    known = {id(op) for op in ops.values()}
    globals_: dict[str, Any] = getattr(fn, "__globals__", {})
    closure: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
        with contextlib.suppress(ValueError):
            closure[name] = cell.cell_contents
    found: set[str] = set()
    for each in _code_objects(code):
        attributes: list[str] = []
        holder: Any = None  # what the previous instruction loaded by name
        for instruction in dis.get_instructions(each):
            name = str(instruction.argval)
            value: Any = None
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                value = globals_.get(name)
            elif instruction.opname == "LOAD_DEREF" and each is code:
                value = closure.get(name)
            if isinstance(value, Op) and id(value) in known:
                found.add(value.id)
            if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                if name == "llm" and chat_complete.id in ops:
                    found.add(chat_complete.id)  # `ctx.llm(...)` calls `llm.chat.complete`
                member = getattr(holder, name, None) if isinstance(holder, Collection) else None
                if isinstance(member, Op) and id(member) in known:
                    found.add(member.id)
                attributes.append(name)
                # `ctx.<vendor>.<resource>.<op>`, or an app's `ctx.data.<app>.<name>.<op>`
                for length in (3, 4):
                    path = tuple(attributes[-length:])
                    if path in by_path:
                        found.add(by_path[path])
            else:
                attributes = []
            holder = value
    return found


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const)


def _where(wf: Workflow) -> str:
    return f"{wf.fn.__module__}.{wf.fn.__qualname__}"


def load_app(path: Path | str = ".") -> App:
    """Load the repo (or app) in folder `path`.

    The folder is imported as a package named after it. Its entry module `app.py` declares an
    `App(...)`; without one, the connectors in `connectors/*.py` are discovered and the app is
    named after the folder. Beside it, the workflows (and the collections, queues, approval
    types and budgets declared with them) of `workflows/*.py` and of each app's
    `apps/<app>/workflows/*.py` are discovered; an app's are named `<app>.<name>`
    (`declare/apps.py`). `resources/` and `policies/` at the root govern them all.
    """
    folder = app_folder(path)
    package = folder.name
    if not package.isidentifier():
        raise AppError(
            f"app folder `{folder.name}` must be a valid Python package name "
            "(letters, digits and underscores): rename the folder"
        )
    parent = str(folder.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    register_repo(package)
    _ensure_package(package, folder)

    app = _declared_app(folder, package)
    app.folder = folder
    # Every app's at once, so its queues are known before its workflows; with nothing to add,
    # still once, to check the budgets against every workflow.
    app.include(**_app_declarations(folder, package))
    if app.resources is None and (folder / resource_files.FOLDER).is_dir():
        app.use_resources(folder, package=package)
    if not app.policy.enabled and (folder / POLICIES_FOLDER).is_dir():
        app.use_policies(folder / POLICIES_FOLDER)
    return app


def _declared_app(folder: Path, package: str) -> App:
    if (folder / f"{ENTRY_MODULE}.py").exists():
        module = _import(f"{package}.{ENTRY_MODULE}", folder / f"{ENTRY_MODULE}.py")
        apps = [value for value in vars(module).values() if isinstance(value, App)]
        if len(apps) != 1:
            raise AppError(
                f"{folder / 'app.py'} must declare exactly one `App(...)`; it declares {len(apps)}"
            )
        return apps[0]

    connectors = [
        v
        for module in _modules(folder, package, "connectors")
        for v in vars(module).values()
        if isinstance(v, Connector)
    ]
    root = _declared_in(_modules(folder, package, "workflows"))
    if not root["workflows"] and not any((folder / APPS_FOLDER).glob("*/workflows/*.py")):
        raise AppError(
            f"{folder} has no app.py declaring `App(...)` and no workflows in workflows/*.py "
            f"or {APPS_FOLDER}/<app>/workflows/*.py: add one or the other"
        )
    name = package.replace("_", "-").lower()
    app = App(name=name, connectors=_unique(connectors), workflows=())
    app.include(**root)
    return app


def _app_declarations(folder: Path, package: str) -> dict[str, list[Any]]:
    """What every app of the repo declares in `apps/<app>/workflows/*.py`, checked to be the
    app's: a workflow defined there that its app does not name was imported under another
    name before the repo was loaded; a budget there must name one of the app's workflows."""
    modules: list[ModuleType] = []
    apps = folder / APPS_FOLDER
    folders = sorted(p for p in apps.iterdir() if p.is_dir()) if apps.is_dir() else []
    for each in [p for p in folders if not p.name.startswith((".", "_"))]:
        check_app_name(each.name)
        found = _modules(each, f"{package}.{APPS_FOLDER}.{each.name}", "workflows")
        for module in found:
            for value in vars(module).values():
                own = isinstance(value, Workflow) and value.fn.__module__ == module.__name__
                if own and value.app != each.name:
                    raise AppError(
                        f"workflow `{value.name}` in {each / 'workflows'} is not named by its "
                        f"app `{each.name}`: its module was imported as `{value.fn.__module__}` "
                        f"before `load_app` loaded the repo. Load the repo first, or import "
                        f"its modules as `{package}.{APPS_FOLDER}.{each.name}.workflows.…`"
                    )
                if isinstance(value, Budget) and value.workflow is None:
                    raise AppError(
                        f"{module.__file__}: a Budget in an app's folder limits one of the "
                        "app's workflows: give it workflow=..., or declare the repo's budget "
                        f"in {folder / 'app.py'} (App(budgets=[...]))"
                    )
        modules += found
    return _declared_in(modules)


def _declared_in(modules: Iterable[ModuleType]) -> dict[str, list[Any]]:
    """What modules declare at their top level, by kind, for `App.include`."""
    kinds: dict[str, type] = {
        "workflows": Workflow,
        "collections": Collection,
        "queues": Queue,
        "approvals": ApprovalType,
        "budgets": Budget,
    }
    found: dict[str, list[Any]] = {kind: [] for kind in kinds}
    for module in modules:
        for value in vars(module).values():
            for kind, cls in kinds.items():
                if isinstance(value, cls):
                    found[kind].append(value)
    return {kind: _unique(values) for kind, values in found.items()}


def _modules(folder: Path, package: str, kind: str) -> list[ModuleType]:
    return [
        _import(f"{package}.{kind}.{file.stem}", file)
        for file in sorted((folder / kind).glob("*.py"))
        if not file.stem.startswith("_")
    ]


def _unique(items: list[T]) -> list[T]:
    """The items without repeats (one object imported by two modules), in their order."""
    seen: set[int] = set()
    unique: list[T] = []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            unique.append(item)
    return unique


def _ensure_package(package: str, folder: Path) -> None:
    if package in sys.modules:
        existing = getattr(sys.modules[package], "__path__", [])
        if str(folder) not in [str(Path(p).resolve()) for p in existing]:
            raise AppError(
                f"a different module named `{package}` is already imported; rename the app "
                f"folder {folder}"
            )
        return
    _import(package, folder / "__init__.py")


def _import(name: str, file: Path) -> ModuleType:
    try:
        return importlib.import_module(name)
    except AppError:
        raise
    except Exception as error:
        raise AppError(f"{file} failed to import: {type(error).__name__}: {error}") from error
