"""remit: durable workflows for a business's operations, on DBOS.

A user's app imports from `remit` (and `remit.testing` in its tests); everything else is
internal.
"""

from remit._version import __version__
from remit.app import App, Queue, load_app
from remit.clock import Clock, SystemClock
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
from remit.context import AsyncContext, Context
from remit.errors import (
    AppError,
    DatabaseError,
    DriverError,
    InputInvalid,
    MissingCredential,
    OpError,
    OpNotDeclared,
    OpUncertain,
    RemitError,
    RunMovedOn,
    RunNotFound,
    SettingsError,
    StepFailed,
    UnknownWorkflow,
)
from remit.retry import RetryPolicy
from remit.runs import Run
from remit.settings import Settings
from remit.workflows import Workflow, workflow

__all__ = [
    "App",
    "AppError",
    "AppliedEffect",
    "AsyncContext",
    "CallContext",
    "Clock",
    "Connector",
    "Context",
    "DatabaseError",
    "Driver",
    "DriverError",
    "Fake",
    "InputInvalid",
    "MissingCredential",
    "Op",
    "OpError",
    "OpNotDeclared",
    "OpUncertain",
    "Queue",
    "RemitError",
    "RetryPolicy",
    "Run",
    "RunMovedOn",
    "RunNotFound",
    "Settings",
    "SettingsError",
    "StepFailed",
    "SystemClock",
    "UnknownWorkflow",
    "Workflow",
    "__version__",
    "implements",
    "load_app",
    "op",
    "workflow",
]
