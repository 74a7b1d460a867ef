"""remit: durable workflows for a business's operations, on DBOS.

A user's app imports from `remit` (and `remit.testing` in its tests); everything else is
internal.
"""

from remit._version import __version__
from remit.app import App, Queue, load_app
from remit.budgets.model import Budget, CostModel, Price
from remit.client import Client, RunHandle
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
from remit.core.backoff import RetryPolicy
from remit.core.clock import Clock, SystemClock
from remit.core.errors import (
    AppError,
    ApprovalNotFound,
    BudgetExceeded,
    CodeChanged,
    DatabaseError,
    DecisionRefused,
    DriverError,
    InputInvalid,
    MissingCredential,
    OpError,
    OpNotDeclared,
    OpUncertain,
    RemitError,
    RetryRefused,
    RunMovedOn,
    RunNotFound,
    SettingsError,
    StepFailed,
    TaskNotFound,
    TaskRefused,
    UnknownWorkflow,
)
from remit.core.runs import Run
from remit.core.settings import Settings
from remit.declare.schedules import Schedule, schedule
from remit.declare.workflows import Workflow, workflow
from remit.execution.context import AsyncContext, Context
from remit.ops.deadlines import Deadline, next_deadline, upcoming_deadlines
from remit.ops.retries import Retried, Retries
from remit.people.approvals import (
    Approval,
    Approvals,
    ApprovalType,
    Decided,
    DecideResult,
    Decision,
)
from remit.people.notify import ApprovalNotice, LogNotifier, Notifier, WebhookNotifier
from remit.people.tasks import Resolved, Task, Tasks
from remit.policy.cedar import PolicyDenied

__all__ = [
    "App",
    "AppError",
    "AppliedEffect",
    "Approval",
    "ApprovalNotFound",
    "ApprovalNotice",
    "ApprovalType",
    "Approvals",
    "AsyncContext",
    "Budget",
    "BudgetExceeded",
    "CallContext",
    "ChatMessage",
    "ChatReply",
    "Client",
    "Clock",
    "CodeChanged",
    "Collection",
    "Connector",
    "Context",
    "CostModel",
    "DatabaseError",
    "Deadline",
    "DecideResult",
    "Decided",
    "Decision",
    "DecisionRefused",
    "Driver",
    "DriverError",
    "Fake",
    "FakeLLM",
    "FakeReply",
    "InputInvalid",
    "LogNotifier",
    "MissingCredential",
    "Notifier",
    "Op",
    "OpError",
    "OpNotDeclared",
    "OpUncertain",
    "PolicyDenied",
    "Price",
    "Queue",
    "RemitError",
    "Resolved",
    "Retried",
    "Retries",
    "RetryPolicy",
    "RetryRefused",
    "Run",
    "RunHandle",
    "RunMovedOn",
    "RunNotFound",
    "Schedule",
    "Settings",
    "SettingsError",
    "StepFailed",
    "SystemClock",
    "Task",
    "TaskNotFound",
    "TaskRefused",
    "Tasks",
    "UnknownWorkflow",
    "WebhookNotifier",
    "Workflow",
    "__version__",
    "chat_complete",
    "collection",
    "implements",
    "llm",
    "load_app",
    "next_deadline",
    "op",
    "schedule",
    "upcoming_deadlines",
    "workflow",
]
