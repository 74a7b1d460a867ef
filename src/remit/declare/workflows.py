"""Workflows: a named Python function with a typed input, the ops it uses and a queue."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel

from remit.core.errors import AppError
from remit.declare.apps import app_of_module, check_app_name, qualified, suggested
from remit.declare.ops import Op
from remit.declare.schedules import Schedule, check_scheduled_input

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
DEFAULT_QUEUE = "default"

In = TypeVar("In", bound=BaseModel)


def check_qualified(kind: str, name: str) -> None:
    """Refuse a name that is neither a plain name nor an app's (`<app>.<name>`)."""
    app, dot, rest = name.partition(".") if isinstance(name, str) else ("", "", name)
    if dot:
        check_app_name(app)
        check_name(kind, rest)
    else:
        check_name(kind, name)


def check_name(kind: str, name: str) -> None:
    """Refuse a name that is not lowercase letters, digits and dashes starting with a letter."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        suggestion = suggested(name, joiner="-", fallback="my-name", prefix="w-")
        raise AppError(
            f"{kind} name `{name}` must be lowercase letters, digits and dashes, starting with "
            f"a letter: for example `{suggestion}`"
        )


@dataclass(frozen=True, eq=False)
class Workflow:
    """A workflow as the app declares it. Made by the `@workflow(...)` decorator."""

    name: str
    fn: Callable[..., Any]
    input: type[BaseModel]
    uses: tuple[Op[Any, Any], ...]
    queue: str
    is_async: bool
    # When runs start on their own, if they do (`@workflow(..., trigger=schedule(...))`).
    trigger: Schedule | None = None
    # The record a run concerns, derived from its parsed input: `(type, id)`, or None for none
    # (`@workflow(..., record=lambda input: ("invoice", input.invoice_id))`).
    record: Callable[[Any], tuple[str, str] | None] | None = None
    # Seconds a run may take from its start to its end, waits included; None for no bound.
    timeout: float | None = None
    # The app whose folder (`apps/<app>/`) declares it, None for the repo's root; its `name`
    # and `queue` are then `<app>.<name>` and `<app>.<queue>` (see `declare/apps.py`).
    app: str | None = None

    @property
    def op_ids(self) -> frozenset[str]:
        return frozenset(used.id for used in self.uses)

    def parse_output(self, output: Any) -> Any:
        """A run's output (its JSON) parsed as the function's return annotation says, when it
        names a type to parse it as (a pydantic model, say); else as it is."""
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:
            return output
        returns = hints.get("return")
        if returns in (None, type(None), Any):
            return output
        from pydantic import TypeAdapter

        return TypeAdapter(returns).validate_python(output)

    def source(self) -> str:
        """The function's source, which the app's version is derived from.

        For a scheduled workflow, its decorator is left out (the input model is named instead;
        the app hashes the name, queue and ops itself): when runs start is not what an attempt
        replays, and a new version would strand the attempts in flight under the old one (they
        are handed over only within a version). Editing a schedule keeps the version; giving a
        workflow one, or taking it away, changes it.
        """
        try:
            text = inspect.getsource(self.fn)
        except (OSError, TypeError):
            return self.fn.__qualname__
        if self.trigger is None:
            return text
        model = f"{self.input.__module__}.{self.input.__qualname__}"
        return f"# scheduled, input {model}\n{_undecorated(text)}"

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, queue={self.queue!r})"


def workflow(
    *,
    name: str,
    input: type[In],
    uses: Iterable[Op[Any, Any]] = (),
    queue: str = DEFAULT_QUEUE,
    trigger: Schedule | None = None,
    record: Callable[[In], tuple[str, str] | None] | None = None,
    timeout: timedelta | float | None = None,
) -> Callable[[Callable[..., Any]], Workflow]:
    """Declare a workflow. The function receives `(ctx, input)`; it may be sync or async.

    `uses` lists every op the workflow may call; calling any other fails the run. With
    `trigger=schedule(...)` a worker starts a run at every instant of the schedule; its input
    is built from nothing, or from `scheduled_at` (the instant) when the model has that field.
    `record` derives the business record a run concerns from its parsed input, e.g.
    `record=lambda input: ("invoice", input.invoice_id)`: the run's start and end, and its
    gates and tasks, are written to that record's activity (`remit activity invoice ID`). A
    start that names a record itself overrides it.
    `timeout` (seconds or a timedelta) bounds a run from its start to its end, time spent
    waiting at gates and sleeping included: a run still going past it fails, saying so.

    In an app's folder (`apps/<app>/`) the workflow is named `<app>.<name>` and runs on the
    queue `<app>.<queue>`.
    """
    check_name("workflow", name)
    seconds = _timeout_seconds(name, timeout)
    if not (isinstance(input, type) and issubclass(input, BaseModel)):
        raise AppError(f"workflow `{name}`: `input` must be a pydantic model class, got {input!r}")
    used = tuple(uses)
    for each in used:
        if not isinstance(each, Op):
            raise AppError(
                f"workflow `{name}` lists {each!r} in `uses`: list ops (made with `remit.op`)"
            )
    check_qualified("queue", queue)
    if record is not None and not callable(record):
        raise AppError(
            f"workflow `{name}`: record={record!r} is not a function: give one that takes the "
            "run's input and returns (type, id), e.g. "
            'record=lambda input: ("invoice", input.invoice_id)'
        )
    if trigger is not None:
        if not isinstance(trigger, Schedule):
            raise AppError(
                f"workflow `{name}`: trigger={trigger!r} is not a schedule: use "
                "trigger=remit.schedule('0 9 * * MON-FRI', tz='Europe/Helsinki')"
            )
        check_scheduled_input(name, input)

    def declare(fn: Callable[..., Any]) -> Workflow:
        if not callable(fn):
            raise AppError(f"@workflow(name={name!r}) must decorate a function")
        try:
            inspect.signature(fn).bind(None, None)
        except TypeError:
            raise AppError(
                f"workflow `{name}`: {fn.__qualname__} must take two arguments, `(ctx, input)`"
            ) from None
        except ValueError:
            pass  # no signature to read (a builtin): the run will tell
        app = app_of_module(getattr(fn, "__module__", None))
        return Workflow(
            name=qualified(app, name),
            fn=fn,
            input=input,
            uses=used,
            # A dotted name is an app's queue already (`ar.mail`).
            queue=queue if "." in queue else qualified(app, queue),
            is_async=inspect.iscoroutinefunction(fn),
            trigger=trigger,
            record=record,
            timeout=seconds,
            app=app,
        )

    return declare


def _timeout_seconds(name: str, timeout: timedelta | float | None) -> float | None:
    if timeout is None:
        return None
    seconds = (
        timeout.total_seconds()
        if isinstance(timeout, timedelta)
        else timeout
        if isinstance(timeout, int | float) and not isinstance(timeout, bool)
        else None
    )
    if seconds is None or not 0 < seconds < float("inf"):
        raise AppError(
            f"workflow `{name}` has timeout={timeout!r}: give how long a run may take, as "
            "seconds greater than 0 or a timedelta, e.g. timeout=timedelta(days=7)"
        )
    return float(seconds)


def _undecorated(source: str) -> str:
    """A decorated function's source from its `def` line on, dedented."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return source
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return text
    return "".join(text.splitlines(keepends=True)[node.lineno - 1 :])
