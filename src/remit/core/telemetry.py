"""Traces and logs: remit's OpenTelemetry spans, their export over OTLP, and JSON log lines.

Spans. Each attempt of a run is a `remit.run` span. Inside it, each op call is a `remit.op`
span (op, effect, idempotency key, status `ok`, `failed`, `uncertain` or `moved-on`, tries),
and each `ctx.step`, gate and sleep is a `remit.step` span. A step replayed from its checkpoint
does not run again, so it has no remit span. An op whose output has `input_tokens`,
`output_tokens`, `model` or `cost_usd` (an LLM call) carries them under OpenTelemetry's GenAI
names (`gen_ai.usage.input_tokens`, ...) and `remit.cost_usd`. Spans start in the current
context: with DBOS's tracing on, they nest under DBOS's workflow and step spans, in one trace.

Export. Spans go to the process's tracer provider. With none (the default) they are the API's
no-op spans and nothing is set up or sent. With `REMIT_OTLP_ENDPOINT` set, a worker installs a
provider that batches spans to that OTLP/HTTP collector, and turns DBOS's own tracing on into
the same provider: DBOS is given no endpoint of its own, so each span is exported once, and
DBOS's spans and remit's share their trace. A process that set up its own provider (the app,
or `opentelemetry-instrument`) gets DBOS's spans and remit's in it.

Logs. `REMIT_LOG_FORMAT=json` writes each log line, remit's and DBOS's, as one JSON object:
time, level, logger, message, the run, attempt, workflow and op it was written for (when it was
written for one), and the trace and span ids of the current span (when one is recording).
Only the message and these fields are written, never a record's other attributes.

No log line holds a credential, at any level and in either format: the secret part of every
token remit mints (an API token, a sign-in link's code, a console session, the wakeup service's
tokens) and the value of a query parameter that carries one (`?code=`, `?token=`, ...) are
written as `[redacted]`, in the message and in a traceback (`redacted`).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from remit._version import __version__
from remit.core.errors import RemitError, SettingsError
from remit.core.settings import Settings
from remit.core.text import printable, unsafe

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import Span, Tracer

    from remit.core.outcome import Outcome
    from remit.core.runs import RunInfo

# OpenTelemetry and DBOS are imported where a span is made or exported, or a log line written
# as JSON: a process that makes none (`remit runs`) loads neither.

F = TypeVar("F", bound=Callable[..., Any])

# What a log line says about the work its thread or task is doing: run, attempt, workflow, op.
_work: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "remit_work", default=None
)
# How the current attempt ended, when the runtime says so before it returns (see `moved_on`).
_ending: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "remit_ending", default=None
)

# The OTLP endpoints this process exports to, each with its span processor (set up once).
_exporting: dict[str, SpanProcessor] = {}
_exporting_lock = threading.Lock()

# What DBOS names its console handler; DBOS adds its own only when its logger has none.
_DBOS_CONSOLE = "__dbos_console_log_handler__"
# DBOS warns this when its tracing is on and no OpenTelemetry *logger* provider is set. remit
# exports traces, not logs, over OTLP, so the warning would only mislead.
_DBOS_NO_LOG_EXPORT = "OTLP is enabled but logger provider not set"


# -- spans -------------------------------------------------------------------------------------


@functools.cache
def _tracer() -> Tracer:
    """remit's tracer, from the process's tracer provider (a proxy to the one set up later, if
    none is yet)."""
    from opentelemetry import trace

    return trace.get_tracer("remit", __version__)


def traced_attempt(workflow: str, version: str, fn: F, outcome: Callable[[Any], str]) -> F:
    """`fn`, the DBOS workflow body of one attempt, run inside a `remit.run` span.

    `outcome` names how an attempt that returned a value ended (done, waiting, ...); one that
    raised is `failed`. The span's attributes say which run, attempt, workflow, version and actor.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def traced_async(run_id: str, attempt: int, input: Any, actor: str) -> Any:
            with _attempt_span(workflow, version, run_id, attempt, actor) as end:
                result = await fn(run_id, attempt, input, actor)
                end(outcome(result))
                return result

        return cast(F, traced_async)

    @functools.wraps(fn)
    def traced(run_id: str, attempt: int, input: Any, actor: str) -> Any:
        with _attempt_span(workflow, version, run_id, attempt, actor) as end:
            result = fn(run_id, attempt, input, actor)
            end(outcome(result))
            return result

    return cast(F, traced)


def moved_on() -> None:
    """Mark the current attempt as one that stopped because its run moved on (a later attempt
    took over, or the run was cancelled): its span's outcome is `moved-on`."""
    ending = _ending.get()
    if ending is not None:
        ending[:] = ["moved-on"]


@contextmanager
def _attempt_span(
    workflow: str, version: str, run_id: str, attempt: int, actor: str
) -> Iterator[Callable[[str], None]]:
    from dbos import DBOS
    from opentelemetry.trace import Status, StatusCode

    workflow_id = DBOS.workflow_id or ""
    # A resumed attempt is a fork that received its first attempt's arguments: its number is
    # the one in its own workflow id.
    number = workflow_id.rsplit(":", 1)[-1]
    attempt = int(number) if number.isdigit() else attempt
    ending: list[str] = []
    work = _work.set({"run_id": run_id, "attempt": attempt, "workflow": workflow})
    ended = _ending.set(ending)
    try:
        with _tracer().start_as_current_span(
            "remit.run",
            attributes={
                "remit.run_id": run_id,
                "remit.attempt": attempt,
                "remit.workflow": workflow,
                "remit.version": version,
                "remit.actor": actor,
                "remit.workflow_id": workflow_id,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:

            def end(outcome: str) -> None:
                span.set_attribute("remit.outcome", ending[0] if ending else outcome)

            try:
                yield end
            except BaseException as error:
                # A `BaseException` that is not an `Exception` stops the attempt without failing
                # it: DBOS cancelled it, or another execution of it owns the workflow now.
                failed = isinstance(error, Exception)
                span.set_attribute("remit.outcome", "failed" if failed else "stopped")
                if failed:
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
                raise
    finally:
        _ending.reset(ended)
        _work.reset(work)


class TracedOp(Protocol):
    """What a call's span names of its op: `declare.ops.Op`, which sits above this module."""

    @property
    def id(self) -> str: ...

    @property
    def effect(self) -> str: ...

    @property
    def idempotent(self) -> bool: ...


def traced_call(call: F) -> F:
    """`OpCaller.call` run inside a `remit.op` span, which records how the call ended."""

    @functools.wraps(call)
    def traced(
        caller: Any,
        run: RunInfo,
        op: TracedOp,
        payload: dict[str, Any],
        *,
        step_id: int,
        key: str,
        **rest: Any,
    ) -> Any:
        work = _work.set({**(_work.get() or {}), "run_id": run.run_id, "op": op.id})
        try:
            with _tracer().start_as_current_span(
                "remit.op",
                attributes={
                    "remit.op.id": op.id,
                    "remit.op.effect": op.effect,
                    "remit.op.idempotent": op.idempotent,
                    "remit.op.idempotency_key": key,
                    "remit.step.id": step_id,
                    "remit.run_id": run.run_id,
                },
            ) as span:
                outcome = call(caller, run, op, payload, step_id=step_id, key=key, **rest)
                if span.is_recording():
                    _record_call(span, outcome, payload)
                return outcome
        finally:
            _work.reset(work)

    return cast(F, traced)


def call_settled(values: Mapping[str, Any]) -> None:
    """Put what the ledger records of an op call (its tries) on the call's span."""
    from opentelemetry import trace

    tries = values.get("tries")
    if isinstance(tries, int):
        trace.get_current_span().set_attribute("remit.op.tries", tries)


def _record_call(span: Span, outcome: Outcome, payload: Mapping[str, Any]) -> None:
    from opentelemetry.trace import Status, StatusCode

    from remit.core.outcome import Ok

    if isinstance(outcome, Ok):
        span.set_attribute("remit.op.status", "ok")
        if isinstance(outcome.output, Mapping):
            _record_usage(span, outcome.output, payload)
        return
    kind = outcome.failure.kind
    if kind == "moved":
        # Not a failure of the call: the run moved on, and the op was not called.
        span.set_attribute("remit.op.status", "moved-on")
        return
    span.set_attribute("remit.op.status", "uncertain" if kind == "uncertain" else "failed")
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, outcome.message))


# An LLM call's usage, by the key an op's output has it under and its GenAI semantic-convention
# name (https://opentelemetry.io/docs/specs/semconv/gen-ai/).
_USAGE = (
    ("input_tokens", "gen_ai.usage.input_tokens"),
    ("output_tokens", "gen_ai.usage.output_tokens"),
)


def _record_usage(span: Span, output: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    for key, name in _USAGE:
        value = output.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            span.set_attribute(name, value)
    model = output.get("model")
    requested = payload.get("model")
    if isinstance(requested, str) or isinstance(model, str):
        span.set_attribute("gen_ai.request.model", str(requested if requested else model))
    if isinstance(model, str):
        span.set_attribute("gen_ai.response.model", model)
    cost = _number(output.get("cost_usd"))
    if cost is not None:
        span.set_attribute("remit.cost_usd", cost)


def _number(value: Any) -> float | None:
    """A cost as a float; a Decimal comes out of JSON as a string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def traced_step(kind: str, name: str, *, seconds: float | None = None) -> Callable[[F], F]:
    """Run the decorated step body (sync or async) inside a `remit.step` span.

    `kind` is `step`, `approval` or `sleep`; `name` the step's name or the gate's key.
    """

    def decorate(body: F) -> F:
        if inspect.iscoroutinefunction(body):

            @functools.wraps(body)
            async def traced_async() -> Any:
                with step_span(kind, name, seconds=seconds) as span:
                    result = await body()
                    _record_step(span, kind, result)
                    return result

            return cast(F, traced_async)

        @functools.wraps(body)
        def traced() -> Any:
            with step_span(kind, name, seconds=seconds) as span:
                result = body()
                _record_step(span, kind, result)
                return result

        return cast(F, traced)

    return decorate


@contextmanager
def step_span(kind: str, name: str, *, seconds: float | None = None) -> Iterator[Span]:
    """A `remit.step` span around a step's work (with its DBOS step id when inside one)."""
    from dbos import DBOS

    attributes: dict[str, str | int | float] = {"remit.step.kind": kind, "remit.step.name": name}
    step_id = DBOS.step_id
    if step_id is not None:
        attributes["remit.step.id"] = step_id
    if seconds is not None:
        attributes["remit.sleep.seconds"] = seconds
    with _tracer().start_as_current_span("remit.step", attributes=attributes) as span:
        yield span


def _record_step(span: Span, kind: str, result: Any) -> None:
    from opentelemetry.trace import Status, StatusCode

    if not span.is_recording() or not isinstance(result, Mapping):
        return
    error = result.get("error")
    if isinstance(error, Mapping):
        # A `ctx.step` whose function raised: its outcome records the failure.
        span.set_attribute("error.type", str(error.get("error_type") or error.get("kind")))
        span.set_status(Status(StatusCode.ERROR, str(error.get("message", ""))))
    if kind == "approval":
        for field in ("id", "status"):
            if isinstance(result.get(field), str):
                span.set_attribute(f"remit.approval.{field}", result[field])


# -- export ------------------------------------------------------------------------------------


def tracing(settings: Settings, *, service: str, version: str, instance: str) -> bool:
    """Set up export to `settings.otlp_endpoint` when it is set, and say whether DBOS's own
    tracing should be on: when this process has a tracer provider (set up here or by the app).

    `service`, `version` and `instance` name the process in the resource of a provider set up
    here (`service.name`, `service.version`, `service.instance.id`).
    """
    from opentelemetry import trace

    if settings.otlp_endpoint is not None:
        _export_to(settings.otlp_endpoint, service=service, version=version, instance=instance)
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return False
    dbos_logger = logging.getLogger("dbos")
    if not any(isinstance(f, _QuietDbos) for f in dbos_logger.filters):
        dbos_logger.addFilter(_QuietDbos())
    return True


def _export_to(endpoint: str, *, service: str, version: str, instance: str) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with _exporting_lock:
        if endpoint in _exporting:
            return
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set, name the process instead.
            resource = Resource.create(
                {"service.version": version, "service.instance.id": instance}
            )
            if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
                resource = resource.merge(Resource({"service.name": service}))
            provider = TracerProvider(resource=resource)
            trace.set_tracer_provider(provider)
        if not isinstance(provider, TracerProvider):
            raise SettingsError(
                f"REMIT_OTLP_ENDPOINT={endpoint!r} is set, but this process already has a tracer "
                f"provider that is not the OpenTelemetry SDK's ({type(provider).__name__}), and "
                "remit cannot add its exporter to it: export through that provider and unset "
                "REMIT_OTLP_ENDPOINT"
            )
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
        provider.add_span_processor(processor)
        _exporting[endpoint] = processor


def flush(timeout: float = 5.0) -> None:
    """Export the spans this process has ended and not yet sent, waiting up to `timeout`
    seconds: a worker does this as it stops, before its process ends."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(int(timeout * 1000))


class _QuietDbos(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_DBOS_NO_LOG_EXPORT)


# -- logs --------------------------------------------------------------------------------------


class ExpectedFailures(logging.Filter):
    """DBOS logs every workflow that raises at ERROR with its traceback. A run that fails with
    one of remit's own errors (a missing credential, a refused call, a step that raised, code
    that changed under it) failed as designed, and its row says why: one line at WARNING, the
    traceback only when the level is DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if record.levelno >= logging.ERROR and isinstance(error, RemitError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = f"a run failed: {type(error).__name__}: {error}", ()
            if not logging.getLogger("remit").isEnabledFor(logging.DEBUG):
                record.exc_info, record.exc_text = None, None
        return True


def quiet_expected_failures() -> None:
    """Put `ExpectedFailures` on DBOS's logger (once), which logs a workflow's failure."""
    dbos_logger = logging.getLogger("dbos")
    if not any(isinstance(f, ExpectedFailures) for f in dbos_logger.filters):
        dbos_logger.addFilter(ExpectedFailures())


def configure_logging(settings: Settings) -> None:
    """Set up this process's log lines: text (the default), or JSON objects on request; in
    either, no credential (`redact_logs`)."""
    redact_logs()
    quiet_expected_failures()
    if settings.log_format != "json":
        logging.basicConfig(
            level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        for handler in logging.getLogger().handlers:
            if not any(isinstance(each, OneLine) for each in handler.filters):
                handler.addFilter(OneLine())
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=settings.log_level, handlers=[handler])
    # DBOS logs to its own console handler, not through the root logger: give it one that
    # writes JSON, under the name DBOS looks for, so it adds no text one of its own.
    dbos_logger = logging.getLogger("dbos")
    consoles: list[logging.Handler] = [h for h in dbos_logger.handlers if h.name == _DBOS_CONSOLE]
    if not consoles:
        consoles = [logging.StreamHandler()]
        consoles[0].name = _DBOS_CONSOLE
        dbos_logger.addHandler(consoles[0])
        dbos_logger.propagate = False
    for console in consoles:
        console.setFormatter(JsonFormatter())


# The credentials remit mints (`policy/tokens.py`, `core/wakeup_tokens.py`), their secret part
# after the prefix and id, which stay to say which one it was.
# Wherever they stand: after a space, a letter, an escape (`\nrmt_…`) or `%20`.
_CREDENTIAL = re.compile(r"(r(?:m[lst]_[0-9a-f]{12}_|w[ai]_))[A-Za-z0-9_-]{8,}")
# A query parameter that carries a credential, in an address (an access log line's path), as
# it is or URL-encoded inside another (`?next=%2Fconsole%3Fcode%3D…`).
_SECRET_QUERY = re.compile(
    r"((?:[?&]|%3F|%26)(?:code|token|access_token|password|secret|key)(?:=|%3D))"
    r"[^&#\s\"'%]+(?:%(?!26)[0-9A-F]{2}[^&#\s\"'%]*)*",
    re.IGNORECASE,
)
REDACTED = "[redacted]"


def redacted(text: str) -> str:
    """`text` with every credential's secret part, and every query parameter that carries one,
    written as `[redacted]`."""
    return _SECRET_QUERY.sub(r"\1" + REDACTED, _CREDENTIAL.sub(r"\1" + REDACTED, text))


class _Redacting:
    """A log record factory that keeps credentials out of every record it makes (`redacted`):
    from its message, and from the traceback of an error logged with one (formatted here, so
    that a formatter writes this text). Every logger's records are made by it, whatever
    handler writes them: remit's, DBOS's, uvicorn's access log."""

    def __init__(self, make: Callable[..., logging.LogRecord]) -> None:
        self.make = make

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a defect of the caller's: the handler reports it, as it would
            return record
        if redacted(message) != message:
            record.msg, record.args = redacted(message), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redacted(logging.Formatter().formatException(record.exc_info))
        return record


def redact_logs() -> None:
    """Make every log record of this process through `_Redacting` (once)."""
    if not isinstance(logging.getLogRecordFactory(), _Redacting):
        logging.setLogRecordFactory(_Redacting(logging.getLogRecordFactory()))


class OneLine(logging.Filter):
    """Keeps each log line one line of what happened: control characters in its message (a
    principal, a reason or a key someone typed) are written as escapes (`core/text.py`), so
    they cannot forge a line or restyle the terminal. A traceback, added by the formatter, is
    left as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if unsafe(message):
            record.msg, record.args = printable(message), None
        return True


class JsonFormatter(logging.Formatter):
    """Formats a log record as one line of JSON (see the module's docstring for its fields)."""

    def format(self, record: logging.LogRecord) -> str:
        from opentelemetry import trace
        from opentelemetry.trace import format_span_id, format_trace_id

        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_work.get() or {})
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = format_trace_id(span.trace_id)
            line["span_id"] = format_span_id(span.span_id)
        if record.exc_text:  # formatted, and kept free of credentials, by `_Redacting`
            line["error"] = record.exc_text
        elif record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        elif record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)
