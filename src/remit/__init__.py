"""remit: durable workflows for a business's operations, on DBOS.

A user's app imports from `remit` (and `remit.testing` in its tests); everything else is
internal.

Each name is imported on first use (PEP 562), from the module that defines it, so that
`import remit` costs little: `remit --help` and `remit --version` load neither DBOS nor
SQLAlchemy. Type checkers read the imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from remit._version import __version__

if TYPE_CHECKING:
    from remit.agent import Chats, OperatorAgent
    from remit.app import App, Queue, load_app
    from remit.budgets.model import Budget
    from remit.changes.forge import ChangeRequest, FakeForge, ForgeDriver, Remote
    from remit.client import Client
    from remit.connectors import (
        AppliedEffect,
        CallContext,
        Connector,
        Driver,
        Fake,
        Op,
        implements,
        op,
    )
    from remit.connectors.data import Collection, collection
    from remit.connectors.llm import (
        ChatMessage,
        ChatReply,
        FakeLLM,
        FakeReply,
        chat_complete,
        llm,
    )
    from remit.connectors.resources import ResourceDriver, ResourceFake, plan_change
    from remit.core.backoff import RetryPolicy
    from remit.core.clock import Clock, SystemClock
    from remit.core.errors import (
        AppError,
        ApprovalNotFound,
        BudgetExceeded,
        ChildFailed,
        CodeChanged,
        DatabaseError,
        DecisionRefused,
        DriverError,
        InputInvalid,
        KeyReused,
        MissingCredential,
        OpError,
        OpNotDeclared,
        OpUncertain,
        RemitError,
        RetryRefused,
        RowLocked,
        RunMovedOn,
        RunNotFound,
        SendRefused,
        SettingsError,
        StepFailed,
        TaskNotFound,
        TaskRefused,
        TooLarge,
        Unauthenticated,
        UnknownWorkflow,
    )
    from remit.core.runs import Run
    from remit.core.settings import Settings
    from remit.declare.costs import CostModel, Price
    from remit.declare.resources import (
        AfterCreate,
        DatabaseCapabilities,
        DatabaseInputs,
        DatabaseOutputs,
        DatabaseSpec,
        Declaration,
        HostSpec,
        Made,
        Reference,
        ResourceType,
        WakeupSpec,
        database_url_secret,
        ref,
        resource_type,
        secret,
        source,
    )
    from remit.declare.schedules import Schedule, schedule
    from remit.declare.steps import Given, StepSet, steps
    from remit.declare.workflows import Workflow, workflow
    from remit.execution.async_context import AsyncContext
    from remit.execution.context import Context
    from remit.execution.waits import ChildHandle
    from remit.ops.deadlines import Deadline, next_deadline, upcoming_deadlines
    from remit.ops.messages import Child, Message, Sent, Waiting
    from remit.ops.retries import Retried, Retries
    from remit.ops.runs import RunHandle
    from remit.people.activity import Activity
    from remit.people.approvals import (
        Approval,
        Approvals,
        ApprovalType,
        Archived,
        Decided,
        DecideResult,
        Decision,
    )
    from remit.people.notify import ApprovalNotice, LogNotifier, Notifier, WebhookNotifier
    from remit.people.tasks import Resolved, Task, Tasks
    from remit.policy.cedar import PolicyDenied

# Where each public name is defined: `__getattr__` imports it from there on first use.
_HOMES: dict[str, tuple[str, ...]] = {
    "remit.app": ("App", "Queue", "load_app"),
    "remit.budgets.model": ("Budget",),
    "remit.client": ("Client",),
    "remit.ops.runs": ("RunHandle",),
    "remit.connectors": (
        "AppliedEffect",
        "CallContext",
        "Connector",
        "Driver",
        "Fake",
        "Op",
        "implements",
        "op",
    ),
    "remit.changes.forge": ("ChangeRequest", "FakeForge", "ForgeDriver", "Remote"),
    "remit.connectors.data": ("Collection", "collection"),
    "remit.connectors.resources": ("ResourceDriver", "ResourceFake", "plan_change"),
    "remit.declare.costs": ("CostModel", "Price"),
    "remit.declare.resources": (
        "AfterCreate",
        "DatabaseCapabilities",
        "DatabaseInputs",
        "DatabaseOutputs",
        "DatabaseSpec",
        "Declaration",
        "HostSpec",
        "Made",
        "Reference",
        "ResourceType",
        "WakeupSpec",
        "database_url_secret",
        "ref",
        "resource_type",
        "secret",
        "source",
    ),
    "remit.agent": ("Chats", "OperatorAgent"),
    "remit.connectors.llm": (
        "ChatMessage",
        "ChatReply",
        "FakeLLM",
        "FakeReply",
        "chat_complete",
        "llm",
    ),
    "remit.core.backoff": ("RetryPolicy",),
    "remit.core.clock": ("Clock", "SystemClock"),
    "remit.core.errors": (
        "AppError",
        "ApprovalNotFound",
        "BudgetExceeded",
        "ChildFailed",
        "CodeChanged",
        "DatabaseError",
        "DecisionRefused",
        "DriverError",
        "InputInvalid",
        "KeyReused",
        "MissingCredential",
        "OpError",
        "OpNotDeclared",
        "OpUncertain",
        "RemitError",
        "RetryRefused",
        "RowLocked",
        "RunMovedOn",
        "RunNotFound",
        "SendRefused",
        "SettingsError",
        "StepFailed",
        "TaskNotFound",
        "TaskRefused",
        "TooLarge",
        "Unauthenticated",
        "UnknownWorkflow",
    ),
    "remit.core.runs": ("Run",),
    "remit.core.settings": ("Settings",),
    "remit.declare.schedules": ("Schedule", "schedule"),
    "remit.declare.steps": ("Given", "StepSet", "steps"),
    "remit.declare.workflows": ("Workflow", "workflow"),
    "remit.execution.async_context": ("AsyncContext",),
    "remit.execution.context": ("Context",),
    "remit.execution.waits": ("ChildHandle",),
    "remit.ops.messages": ("Child", "Message", "Sent", "Waiting"),
    "remit.ops.deadlines": ("Deadline", "next_deadline", "upcoming_deadlines"),
    "remit.ops.retries": ("Retried", "Retries"),
    "remit.people.activity": ("Activity",),
    "remit.people.approvals": (
        "Approval",
        "Approvals",
        "ApprovalType",
        "Archived",
        "Decided",
        "DecideResult",
        "Decision",
    ),
    "remit.people.notify": ("ApprovalNotice", "LogNotifier", "Notifier", "WebhookNotifier"),
    "remit.people.tasks": ("Resolved", "Task", "Tasks"),
    "remit.policy.cedar": ("PolicyDenied",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "Activity",
    "AfterCreate",
    "App",
    "AppError",
    "AppliedEffect",
    "Approval",
    "ApprovalNotFound",
    "ApprovalNotice",
    "ApprovalType",
    "Approvals",
    "Archived",
    "AsyncContext",
    "Budget",
    "BudgetExceeded",
    "CallContext",
    "ChangeRequest",
    "ChatMessage",
    "ChatReply",
    "Chats",
    "Child",
    "ChildFailed",
    "ChildHandle",
    "Client",
    "Clock",
    "CodeChanged",
    "Collection",
    "Connector",
    "Context",
    "CostModel",
    "DatabaseCapabilities",
    "DatabaseError",
    "DatabaseInputs",
    "DatabaseOutputs",
    "DatabaseSpec",
    "Deadline",
    "DecideResult",
    "Decided",
    "Decision",
    "DecisionRefused",
    "Declaration",
    "Driver",
    "DriverError",
    "Fake",
    "FakeForge",
    "FakeLLM",
    "FakeReply",
    "ForgeDriver",
    "Given",
    "HostSpec",
    "InputInvalid",
    "KeyReused",
    "LogNotifier",
    "Made",
    "Message",
    "MissingCredential",
    "Notifier",
    "Op",
    "OpError",
    "OpNotDeclared",
    "OpUncertain",
    "OperatorAgent",
    "PolicyDenied",
    "Price",
    "Queue",
    "Reference",
    "RemitError",
    "Remote",
    "Resolved",
    "ResourceDriver",
    "ResourceFake",
    "ResourceType",
    "Retried",
    "Retries",
    "RetryPolicy",
    "RetryRefused",
    "RowLocked",
    "Run",
    "RunHandle",
    "RunMovedOn",
    "RunNotFound",
    "Schedule",
    "SendRefused",
    "Sent",
    "Settings",
    "SettingsError",
    "StepFailed",
    "StepSet",
    "SystemClock",
    "Task",
    "TaskNotFound",
    "TaskRefused",
    "Tasks",
    "TooLarge",
    "Unauthenticated",
    "UnknownWorkflow",
    "Waiting",
    "WakeupSpec",
    "WebhookNotifier",
    "Workflow",
    "__version__",
    "chat_complete",
    "collection",
    "database_url_secret",
    "implements",
    "llm",
    "load_app",
    "next_deadline",
    "op",
    "plan_change",
    "ref",
    "resource_type",
    "schedule",
    "secret",
    "source",
    "steps",
    "upcoming_deadlines",
    "workflow",
]

# Hidden from type checkers, which read the imports above instead: to them a misspelt name
# stays an error rather than whatever a module `__getattr__` returns.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        """Import a public name from its module on first use, and keep it here."""
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module 'remit' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
