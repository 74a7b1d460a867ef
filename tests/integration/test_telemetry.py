"""Traces: the spans a run leaves, nested under DBOS's, and their export over OTLP/HTTP.

The in-process tests send spans to an SDK tracer provider with an in-memory exporter. A process
has one global tracer provider, set once: this module sets it for the rest of the session and
shuts its exporter down when it is done, so later tests' spans are dropped. The export test
runs `remit worker` in a subprocess, against a real OTLP/HTTP receiver on a local port.
"""

from __future__ import annotations

import gzip
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from remit import App, DriverError
from remit.testing import Harness
from tests.apps.telemetry_app.app import ANSWER, ask, talk
from tests.processes import Workers
from tests.support import REFUND, FakeShop, broken_step, purchase, purchase_async, send_email, shop

TELEMETRY_APP = Path(__file__).parent.parent / "apps" / "telemetry_app"


def make_app() -> App:
    return App(
        name="traced",
        workflows=[purchase, purchase_async, broken_step, ask],
        connectors=[shop, talk],
        approvals=[REFUND, ANSWER],
    )


@pytest.fixture(scope="module")
def recorded() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


@pytest.fixture
def spans(recorded: InMemorySpanExporter) -> InMemorySpanExporter:
    recorded.clear()
    return recorded


class Trace:
    """The spans of one attempt's trace, by name and by parent."""

    def __init__(self, spans: list[ReadableSpan]) -> None:
        self.spans = spans

    def named(self, name: str) -> list[ReadableSpan]:
        return sorted((s for s in self.spans if s.name == name), key=lambda s: s.start_time or 0)

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans]
        return found[0]

    def parent(self, span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, f"{span.name} has no parent"
        [parent] = [s for s in self.spans if s.context.span_id == span.parent.span_id]
        return parent


def attempt_trace(
    exporter: InMemorySpanExporter, run_id: str, attempt: int, *, timeout: float = 10.0
) -> Trace:
    """The trace of one attempt, once its DBOS workflow span has ended (just after the run's
    row says how the attempt ended)."""
    workflow_id = f"{run_id}:{attempt}"
    deadline = time.monotonic() + timeout
    while True:
        finished = exporter.get_finished_spans()
        roots = [
            s
            for s in finished
            if s.instrumentation_scope is not None
            and s.instrumentation_scope.name == "dbos-tracer"
            and (s.attributes or {}).get("operationType") == "workflow"
            and (s.attributes or {}).get("operationUUID") == workflow_id
        ]
        if roots:
            trace_id = roots[0].context.trace_id
            return Trace([s for s in finished if s.context.trace_id == trace_id])
        assert time.monotonic() < deadline, f"no trace of {workflow_id}"
        time.sleep(0.02)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize("workflow", ["purchase", "purchase-async"])
def test_a_run_is_a_span_with_its_op_calls_and_steps_under_dbos_spans(
    database_url: str, spans: InMemorySpanExporter, workflow: str
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.run(workflow, {"sku": "sku-1", "quantity": 2})
        assert run.status == "done", run.error
        version = h.worker.runtime.version
        found = attempt_trace(spans, run.run_id, 1)

    span = found.one("remit.run")
    assert attrs(span) == {
        "remit.run_id": run.run_id,
        "remit.attempt": 1,
        "remit.workflow": workflow,
        "remit.version": version,
        "remit.actor": "user:test",
        "remit.workflow_id": f"{run.run_id}:1",
        "remit.outcome": "done",
    }
    assert span.status.status_code is StatusCode.UNSET
    # DBOS's workflow span is the root; remit's run span is its child.
    root = found.parent(span)
    assert (root.name, root.parent) == (workflow, None)

    ops = found.named("remit.op")
    expected = ["shop.items.get", "shop.orders.create"]
    if workflow == "purchase":
        expected.append("shop.emails.send")
    assert [attrs(op)["remit.op.id"] for op in ops] == expected
    for op in ops:
        values = attrs(op)
        step = values["remit.step.id"]
        assert values["remit.op.idempotency_key"] == f"{run.run_id}:{step}"
        assert (values["remit.op.status"], values["remit.op.tries"]) == ("ok", 1)
        assert values["remit.run_id"] == run.run_id
        # Each op call runs inside DBOS's step span, named for the op, under the run span.
        dbos_step = found.parent(op)
        assert dbos_step.name == values["remit.op.id"]
        assert found.parent(dbos_step) is span
        assert "gen_ai.usage.input_tokens" not in values
    assert [attrs(op)["remit.op.effect"] for op in ops][:2] == ["read", "write"]

    step = found.one("remit.step")
    assert attrs(step) == {
        "remit.step.kind": "step",
        "remit.step.name": "total",
        "remit.step.id": 2,
    }
    assert found.parent(found.parent(step)) is span


def test_failures_mark_the_op_the_step_and_the_run(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        missing = h.run("purchase", {"sku": "sku-404"})
        broken = h.run("broken-step", {"sku": "sku-1"})
        shop_fake = h.fake("shop", FakeShop)
        shop_fake.failures[send_email.id].append(
            DriverError("the mail server hung up", retryable=True, maybe_applied=True)
        )
        unsure = h.start("purchase", {"sku": "sku-2"})
        h.wait(unsure.run_id, until=("waiting",))
        traces = [attempt_trace(spans, r.run_id, 1) for r in (missing, broken, unsure)]
    assert (missing.status, broken.status) == ("failed", "failed")

    # A read the vendor refused: the op failed, and so did the run, with the error recorded.
    found = traces[0]
    op = found.one("remit.op")
    assert attrs(op)["remit.op.status"] == "failed"
    assert attrs(op)["error.type"] == "driver"
    assert op.status.status_code is StatusCode.ERROR
    assert "no item sku-404" in (op.status.description or "")
    run_span = found.one("remit.run")
    assert attrs(run_span)["remit.outcome"] == "failed"
    assert run_span.status.status_code is StatusCode.ERROR
    assert [e.name for e in run_span.events] == ["exception"]
    assert "no item sku-404" in str(run_span.events[0].attributes)

    # A step whose function raised.
    step = traces[1].one("remit.step")
    assert step.status.status_code is StatusCode.ERROR
    assert attrs(step)["error.type"] == "ValueError"
    assert attrs(traces[1].one("remit.run"))["remit.outcome"] == "failed"

    # A write that may have reached the vendor and cannot be repeated: uncertain.
    [mail] = [op for op in traces[2].named("remit.op") if attrs(op)["remit.op.id"] == send_email.id]
    assert attrs(mail)["remit.op.status"] == "uncertain"
    assert attrs(mail)["remit.op.tries"] == 1
    assert mail.status.status_code is StatusCode.ERROR


def test_a_gate_ends_its_attempt_waiting_and_the_resumed_attempt_is_its_own_run_span(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("ask", {"text": "may I?", "approve": True})
        gate = h.gate(run.run_id)
        first = attempt_trace(spans, run.run_id, 1)
        h.decide(gate.id, "approved")
        done = h.wait(run.run_id)
        assert done.status == "done", done.error
        second = attempt_trace(spans, run.run_id, 2)

    waiting = first.one("remit.run")
    assert (attrs(waiting)["remit.attempt"], attrs(waiting)["remit.outcome"]) == (1, "waiting")
    asked = first.named("remit.step")[-1]
    assert attrs(asked) == {
        "remit.step.kind": "approval",
        "remit.step.name": "send",
        "remit.step.id": 3,
        "remit.approval.id": gate.id,
        "remit.approval.status": "pending",
    }
    assert [attrs(op)["remit.op.id"] for op in first.named("remit.op")] == ["talk.replies.create"]

    resumed = second.one("remit.run")
    assert attrs(resumed)["remit.workflow_id"] == f"{run.run_id}:2"
    assert (attrs(resumed)["remit.attempt"], attrs(resumed)["remit.outcome"]) == (2, "done")
    assert resumed.context.trace_id != waiting.context.trace_id
    # The steps before the gate were copied, not run: no remit span for them; the gate's step
    # ran again and read the decision; then the nap.
    assert second.named("remit.op") == []
    assert [
        (attrs(s)["remit.step.kind"], attrs(s)["remit.step.name"])
        for s in second.named("remit.step")
    ] == [
        ("approval", "send"),
        ("sleep", "sleep"),
    ]
    assert attrs(second.named("remit.step")[0])["remit.approval.status"] == "approved"
    assert attrs(second.named("remit.step")[1])["remit.sleep.seconds"] == 0.01


def test_an_llm_call_carries_its_tokens_model_and_cost(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.run("ask", {"text": "a flaky question"})
        assert run.status == "done", run.error
        found = attempt_trace(spans, run.run_id, 1)

    values = attrs(found.one("remit.op"))
    assert values["remit.op.id"] == "talk.replies.create"
    assert values["remit.op.status"] == "ok"
    assert values["remit.op.tries"] == 2  # the model was overloaded once
    assert values["gen_ai.usage.input_tokens"] == 3
    assert values["gen_ai.usage.output_tokens"] == 5
    assert values["gen_ai.request.model"] == "small-1"
    assert values["gen_ai.response.model"] == "small-1-2025"
    assert values["remit.cost_usd"] == pytest.approx(0.0008)


# -- export --------------------------------------------------------------------------------------


class Receiver:
    """An OTLP/HTTP trace receiver on a local port: it decodes each export and keeps its spans."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                received.take(self.path, body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            {
                                "name": span.name,
                                "scope": scope_spans.scope.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": _attributes(span.attributes),
                                "resource": resource,
                            }
                        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_worker_exports_remits_spans_and_dbos_spans_in_one_trace(
    database_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    workers = Workers(
        database_url,
        tmp_path,
        app=TELEMETRY_APP,
        REMIT_OTLP_ENDPOINT=receiver.url,
        REMIT_LOG_FORMAT="json",
    )
    try:
        proc = workers.start()
        workers.wait_serving(proc)
        run_id = workers.remit("start", "ask", "--input", '{"text": "a flaky question"}')
        assert workers.wait_finished(run_id).status == "done"
        # The worker flushes its spans as it stops.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, workers.logs()
        log = workers.log(0)
    finally:
        workers.close()

    assert set(receiver.paths) == {"/v1/traces"}
    [run_span] = [
        s
        for s in receiver.spans
        if s["name"] == "remit.run" and s["attributes"]["remit.run_id"] == run_id
    ]
    trace_id = run_span["trace_id"]
    in_trace = [s for s in receiver.spans if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in in_trace}
    # Exported once each.
    assert len(by_id) == len(in_trace)
    assert {s["scope"] for s in in_trace} == {"remit", "dbos-tracer"}
    assert {s["resource"]["service.name"] for s in in_trace} == {"telemetry-app"}
    root = by_id[run_span["parent"]]
    assert (root["scope"], root["name"], root["parent"]) == ("dbos-tracer", "ask", "")
    assert run_span["attributes"]["remit.outcome"] == "done"
    [op] = [s for s in in_trace if s["name"] == "remit.op"]
    assert by_id[op["parent"]]["name"] == "talk.replies.create"
    assert by_id[by_id[op["parent"]]["parent"]] == run_span
    assert op["attributes"]["gen_ai.usage.output_tokens"] == 5
    assert op["attributes"]["remit.cost_usd"] == pytest.approx(0.0008)

    # The worker's JSON log line about the retry names the run, the op, and the op's span.
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    [retry] = [line for line in lines if "trying again" in line["message"]]
    assert (retry["run_id"], retry["op"], retry["workflow"]) == (
        run_id,
        "talk.replies.create",
        "ask",
    )
    assert (retry["trace_id"], retry["span_id"]) == (trace_id, op["span_id"])
