"""Nothing hangs silently: a driver that hangs is given up on at its op's timeout, a run past its
workflow's timeout fails, a `BaseException` fails its run and leaves the worker up, transport
errors retry as the driver would have said, and a call in flight shows.

The fake desk's ops take 0.3 s at most per try. `script[op_id]` lists what each next call does:
`hang` (blocks until the test ends), `exit`, `interrupt`, `generator-exit`, `reset` (a dropped
connection), `refused` (a connection never made), `read-timeout` and `connect` (httpx's).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import (
    App,
    ApprovalType,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    RetryPolicy,
    implements,
    op,
    workflow,
)
from remit.core.schema import approvals
from remit.ops.reconciler import Reconciler, Timeouts
from remit.people.tasks import TaskOpener
from remit.testing import Harness, ManualClock

QUICK = RetryPolicy(max_tries=2, initial=0.01, factor=1.0, cap=0.01)
TIMEOUT = 0.3


class Ask(BaseModel):
    subject: str = "inv_1"


class Answer(BaseModel):
    subject: str
    n: int


lookup = op(
    "desk.files.lookup", effect="read", input=Ask, output=Answer, retry=QUICK, timeout=TIMEOUT
)
save = op(
    "desk.files.save",
    effect="write",
    idempotent=True,
    input=Ask,
    output=Answer,
    retry=QUICK,
    timeout=TIMEOUT,
)
send = op(
    "desk.letters.send", effect="write", input=Ask, output=Answer, retry=QUICK, timeout=TIMEOUT
)
slow = op("desk.files.slow", effect="read", input=Ask, output=Answer, timeout=30)


class DeskDriver(Driver):
    @implements(lookup)
    def lookup(self, input: Ask, call: CallContext) -> Answer:
        raise DriverError("no live desk in tests", retryable=False)

    @implements(save)
    def save(self, input: Ask, call: CallContext) -> Answer:
        raise DriverError("no live desk in tests", retryable=False)

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Answer:
        raise DriverError("no live desk in tests", retryable=False)

    @implements(slow)
    def slow(self, input: Ask, call: CallContext) -> Answer:
        raise DriverError("no live desk in tests", retryable=False)


RELEASE = threading.Event()  # set when a test ends: every hung call then returns


class FakeDesk(Fake):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script: dict[str, list[str]] = defaultdict(list)
        self.timeouts: list[float] = []

    def _act(self, op_id: str, call: CallContext) -> Answer:
        self.timeouts.append(call.timeout)
        what = self.script[op_id].pop(0) if self.script[op_id] else "ok"
        if what == "hang":
            RELEASE.wait(60)
        elif what == "exit":
            raise SystemExit(3)
        elif what == "interrupt":
            raise KeyboardInterrupt
        elif what == "generator-exit":
            raise GeneratorExit("closed")
        elif what == "reset":
            raise ConnectionResetError("connection reset by peer")
        elif what == "refused":
            raise ConnectionRefusedError("connection refused")
        elif what == "read-timeout":
            raise httpx.ReadTimeout("timed out reading the answer")
        elif what == "connect":
            raise httpx.ConnectError("name or service not known")
        return Answer(subject=call.idempotency_key, n=len(self.calls))

    @implements(lookup)
    def lookup(self, input: Ask, call: CallContext) -> Answer:
        return self._act(lookup.id, call)

    @implements(save)
    def save(self, input: Ask, call: CallContext) -> Answer:
        return self._act(save.id, call)

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Answer:
        return self._act(send.id, call)

    @implements(slow)
    def slow(self, input: Ask, call: CallContext) -> Answer:
        RELEASE.wait(60)
        return Answer(subject="slow", n=0)


desk = Connector("desk", ops=[lookup, save, send, slow], driver=DeskDriver, fake=FakeDesk)


class Raise(BaseModel):
    what: str


@workflow(name="file", input=Ask, uses=[lookup, save])
def file(ctx: Context, input: Ask) -> dict[str, Any]:
    found = ctx.call(lookup, subject=input.subject)
    saved = ctx.call(save, subject=found.subject)
    return {"found": found.n, "saved": saved.n}


@workflow(name="post", input=Ask, uses=[send])
def post(ctx: Context, input: Ask) -> int:
    return ctx.call(send, subject=input.subject).n


@workflow(name="raises", input=Raise)
def raises(ctx: Context, input: Raise) -> None:
    ctx.step("before", lambda: 1)
    if input.what == "exit":
        raise SystemExit("the workflow called exit")
    if input.what == "interrupt":
        raise KeyboardInterrupt
    raise GeneratorExit


@workflow(name="crawl", input=Ask, uses=[lookup], timeout=1)
def crawl(ctx: Context, input: Ask) -> str:
    ctx.step("first", lambda: 1)
    ctx.sleep(1.5)
    ctx.step("second", lambda: 2)
    return "done"


@workflow(name="slow-read", input=Ask, uses=[slow])
def slow_read(ctx: Context, input: Ask) -> int:
    return ctx.call(slow, subject=input.subject).n


@workflow(name="slow-then-step", input=Ask, uses=[slow], timeout=60)
def slow_then_step(ctx: Context, input: Ask) -> int:
    found = ctx.call(slow, subject=input.subject).n
    return int(ctx.step("after", lambda: found + 1))


class Note(BaseModel):
    text: str


@workflow(name="sign-off", input=Ask, timeout=timedelta(hours=1))
def sign_off(ctx: Context, input: Ask) -> str:
    return ctx.approval("ok", type="note", title="sign off", draft=Note(text="x")).status


def make_app() -> App:
    return App(
        name="desk",
        workflows=[file, post, raises, crawl, slow_read, slow_then_step, sign_off],
        connectors=[desk],
        approvals=[ApprovalType("note", draft=Note)],
    )


@pytest.fixture(autouse=True)
def _release_hung_calls() -> Any:
    RELEASE.clear()
    yield
    RELEASE.set()


def fake(harness: Harness) -> FakeDesk:
    return harness.fake("desk", FakeDesk)


def reconciler(harness: Harness) -> Reconciler:
    return Reconciler(
        harness.run_store,
        harness.worker.client,
        version=harness.app.version,
        live_versions=harness.worker.live_versions,
        tasks=TaskOpener(harness.worker.db, harness.app.name, clock=harness.worker.runtime.clock),
        timeouts=Timeouts.of(harness.app, 120.0),
    )


def test_a_hung_read_is_given_up_on_at_its_timeout_and_retried(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[lookup.id] = ["hang"]
        run = harness.run("file", {})

        assert run.status == "done", run.error
        rows = harness.ledger(run.run_id)
        assert [(r.op_id, r.status, r.tries) for r in rows] == [
            (lookup.id, "ok", 2),
            (save.id, "ok", 1),
        ]
        # The driver is told how long its try has.
        assert fake(harness).timeouts[0] == TIMEOUT


def test_a_read_that_hangs_every_try_fails_its_run_naming_the_timeout(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[lookup.id] = ["hang", "hang"]
        run = harness.run("file", {})

        assert run.status == "failed"
        assert "no answer within 0.3s" in (run.error or "")
        assert "REMIT_OP_TIMEOUT" in (run.error or "")
        (row,) = harness.ledger(run.run_id)
        assert (row.op_id, row.status, row.tries) == (lookup.id, "failed", 2)
        # The worker is still serving.
        assert harness.run("file", {}).status == "done"


def test_a_hung_idempotent_write_is_tried_again_with_the_same_key(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[save.id] = ["hang"]
        run = harness.run("file", {})

        # The fake, like a vendor, holds a key's second request behind its first, which hangs:
        # both tries time out, each with the same key, and the run fails saying so.
        assert run.status == "failed"
        assert "no answer within 0.3s" in (run.error or "")
        keys = [key for called, key in fake(harness).calls if called == save.id]
        assert keys == [f"{run.run_id}:2", f"{run.run_id}:2"]
        assert [(r.op_id, r.status, r.tries) for r in harness.ledger(run.run_id)] == [
            (lookup.id, "ok", 1),
            (save.id, "failed", 2),
        ]


def test_a_hung_non_idempotent_write_is_uncertain_at_once_with_its_task(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[send.id] = ["hang"]
        run = harness.start("post", {})
        task = harness.task(run.run_id, timeout=10)

        assert task.op_id == send.id
        (row,) = harness.ledger(run.run_id)
        assert row.status == "uncertain"
        assert "no answer within 0.3s" in (row.error or "")
        # Called once: never again on its own.
        assert [c for c, _ in fake(harness).calls] == [send.id]


@pytest.mark.parametrize(
    ("what", "named"),
    [
        ("exit", "SystemExit"),
        ("interrupt", "KeyboardInterrupt"),
        ("generator-exit", "GeneratorExit"),
    ],
)
def test_a_base_exception_in_a_workflow_fails_its_run_and_the_worker_stays_up(
    database_url: str, what: str, named: str
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("raises", {"what": what}, timeout=20)

        assert run.status == "failed"
        assert f"the workflow raised {named}" in (run.error or "")
        # DBOS records the attempt's end just after the run's row.
        assert _dbos_status(harness, f"{run.run_id}:1", until="ERROR") == "ERROR"
        assert harness.run("file", {}).status == "done"


@pytest.mark.parametrize("what", ["exit", "interrupt", "generator-exit"])
def test_a_base_exception_in_a_driver_fails_a_read_and_makes_a_write_uncertain(
    database_url: str, what: str
) -> None:
    named = {"exit": "SystemExit", "interrupt": "KeyboardInterrupt"}.get(what, "GeneratorExit")
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[lookup.id] = [what]
        fake(harness).script[send.id] = [what]

        read = harness.run("file", {}, timeout=20)
        assert read.status == "failed"
        assert f"op `{lookup.id}` raised {named}" in (read.error or "")

        write = harness.start("post", {})
        harness.task(write.run_id, timeout=10)
        (row,) = harness.ledger(write.run_id)
        assert (row.status, named in (row.error or "")) == ("uncertain", True)
        assert harness.run("file", {}).status == "done"


def test_transport_errors_are_retried_as_the_driver_would_have_said(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[lookup.id] = ["reset"]
        fake(harness).script[save.id] = ["read-timeout"]
        run = harness.run("file", {})
        assert run.status == "done", run.error
        assert [(r.op_id, r.tries) for r in harness.ledger(run.run_id)] == [
            (lookup.id, 2),
            (save.id, 2),
        ]

        # A connection never made sent nothing: a non-idempotent write is tried again.
        for never_sent in ("refused", "connect"):
            fake(harness).script[send.id] = [never_sent]
            sent = harness.run("post", {})
            assert sent.status == "done", sent.error
            assert [r.tries for r in harness.ledger(sent.run_id)] == [2]


@pytest.mark.parametrize("failure", ["reset", "read-timeout"])
def test_a_transport_error_after_sending_makes_a_write_uncertain(
    database_url: str, failure: str
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).script[send.id] = [failure]
        run = harness.start("post", {})
        task = harness.task(run.run_id, timeout=10)

        assert task.op_id == send.id
        assert [c for c, _ in fake(harness).calls] == [send.id]


def test_a_run_past_its_workflow_timeout_fails_before_its_next_step(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("crawl", {}, timeout=20)

        assert run.status == "failed"
        assert "went past its workflow's timeout of 1s (`crawl`, timeout=)" in (run.error or "")
        names = [s["function_name"] for s in harness.steps(run.run_id, 1)]
        assert "second" not in names


def test_a_run_waiting_past_its_timeout_is_failed_by_the_reconciler(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as harness:
        run = harness.start("sign-off", {})
        gate = harness.gate(run.run_id)
        assert reconciler(harness).run_pass(dry_run=True).actions == []

        clock.advance(hours=2)
        dry = reconciler(harness).run_pass(dry_run=True)
        assert [(a.kind, a.run_id) for a in dry.actions] == [("overdue", run.run_id)]
        assert harness.runs.get(run.run_id).status == "waiting"

        done = reconciler(harness).run_pass()
        assert [(a.kind, a.status) for a in done.actions] == [("overdue", "failed")]
        failed = harness.runs.get(run.run_id)
        assert failed.status == "failed"
        assert "timeout of 1h (`sign-off`, timeout=) while waiting" in (failed.error or "")
        with harness.worker.db.engine.connect() as conn:
            status = conn.execute(
                sa.select(approvals.c.status).where(approvals.c.id == gate.id)
            ).scalar_one()
        assert status == "cancelled"
        # A second pass finds nothing more to do.
        assert reconciler(harness).run_pass().actions == []


def test_a_retried_run_has_its_whole_timeout_again(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as harness:
        run = harness.start("sign-off", {})
        harness.gate(run.run_id)
        clock.advance(hours=2)
        assert [a.kind for a in reconciler(harness).run_pass().actions] == ["overdue"]

        harness.retry(run.run_id)
        gate = harness.gate(run.run_id)
        # Counted from the retry: not overdue.
        assert reconciler(harness).run_pass().actions == []
        harness.decide(gate.id, "approved")
        done = harness.wait(run.run_id)
        assert (done.status, done.output) == ("done", "approved"), done.error


def test_a_run_past_its_timeout_with_a_call_in_flight_is_left_to_its_call(
    database_url: str,
) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as harness:
        run = harness.start("slow-then-step", {})
        _wait_for_rows(harness, run.run_id)
        clock.advance(minutes=2)
        assert reconciler(harness).run_pass().actions == []
        assert harness.runs.get(run.run_id).status == "running"

        # The call answers; the run fails before its next step, the call's outcome recorded.
        RELEASE.set()
        failed = harness.wait(run.run_id)
        assert failed.status == "failed"
        assert "timeout of 1m (`slow-then-step`, timeout=)" in (failed.error or "")
        assert [(r.op_id, r.status) for r in harness.ledger(run.run_id)] == [(slow.id, "ok")]


def test_a_read_in_flight_shows_in_the_ledger_and_the_reconciler_reports_it_stuck(
    database_url: str,
) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as harness:
        run = harness.start("slow-read", {})
        harness.wait(run.run_id, until=("running",))
        rows = _wait_for_rows(harness, run.run_id)
        assert [(r.op_id, r.status, r.finished_at) for r in rows] == [(slow.id, "started", None)]
        assert reconciler(harness).run_pass().actions == []

        clock.advance(minutes=5)
        report = reconciler(harness).run_pass()
        (stuck,) = [a for a in report.actions if a.kind == "stuck"]
        assert stuck.run_id == run.run_id
        assert f"`{slow.id}`" in stuck.reason
        assert "in flight for 5m" in stuck.reason
        # Five tries of 30 s and the waits between them.
        assert "past the 2m38s its tries may take" in stuck.reason
        # Reported, not acted on.
        assert harness.runs.get(run.run_id).status == "running"
        RELEASE.set()
        assert harness.wait(run.run_id).status == "done"


def _dbos_status(harness: Harness, workflow_id: str, *, until: str) -> str:
    deadline = time.monotonic() + 10
    while True:
        (status,) = harness.worker.client.list_workflows(workflow_ids=[workflow_id])
        if status.status == until or time.monotonic() > deadline:
            return str(status.status)
        time.sleep(0.05)


def _wait_for_rows(harness: Harness, run_id: str) -> list[Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = harness.ledger(run_id)
        if rows:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} wrote no ledger row")
