"""Uncertain writes become a person's task: one per call, and the run waits for the answer.

A non-idempotent write whose vendor answer was lost after the vendor may have acted (a 504) is
uncertain. Its run waits at one task; resolving it `done` carries the run on with the output
given, `not done` calls the op again with the same key or fails the run, as the op declares.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import BaseModel

from remit import (
    App,
    AsyncContext,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    KeyReused,
    TaskRefused,
    implements,
    op,
    workflow,
)
from remit.connectors.base import AppliedEffect
from remit.connectors.credentials import SecretKey, Secrets
from remit.core.database import Database
from remit.core.schema import call_inputs, resumes
from remit.core.schema import ledger as ledger_table
from remit.ops.reconciler import Reconciler
from remit.people.tasks import Resolved, TaskOpener
from remit.serve.api import create_api
from remit.testing import Harness
from tests.support import FAST

T = TypeVar("T")


class LetterIn(BaseModel):
    to: str
    text: str


class Letter(BaseModel):
    letter_id: str
    pages: int = 1


class NoteIn(BaseModel):
    letter_id: str


class Note(BaseModel):
    note_id: str


post_letter = op("post.letters.send", effect="write", input=LetterIn, output=Letter, retry=FAST)
post_card = op(
    "post.cards.send",
    effect="write",
    input=LetterIn,
    output=Letter,
    retry=FAST,
    on_not_done="retry",
)
write_note = op(
    "post.notes.write", effect="write", idempotent=True, input=NoteIn, output=Note, retry=FAST
)


class PostDriver(Driver):
    @implements(post_letter)
    def letter(self, input: LetterIn, call: CallContext) -> Letter:
        raise DriverError("no live post office in tests", retryable=False)

    @implements(post_card)
    def card(self, input: LetterIn, call: CallContext) -> Letter:
        raise DriverError("no live post office in tests", retryable=False)

    @implements(write_note)
    def note(self, input: NoteIn, call: CallContext) -> Note:
        raise DriverError("no live post office in tests", retryable=False)


class FakePost(Fake):
    """The post office in memory. `lost[op_id]` scripts answers that never arrive: `"after"`
    applies the write and then times out (the vendor acted), `"before"` times out without
    applying it (it did not)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lost: dict[str, list[str]] = defaultdict(list)

    def _timeout(self, op_id: str, when: str) -> None:
        if self.lost[op_id] and self.lost[op_id][0] == when:
            self.lost[op_id].pop(0)
            raise DriverError("the post office did not answer in time", retryable=True, status=504)

    @implements(post_letter)
    def letter(self, input: LetterIn, call: CallContext) -> Letter:
        self._timeout(post_letter.id, "before")
        return Letter(letter_id=f"lt_{len(self.effects) + 1}")

    @implements(post_card)
    def card(self, input: LetterIn, call: CallContext) -> Letter:
        self._timeout(post_card.id, "before")
        return Letter(letter_id=f"cd_{len(self.effects) + 1}")

    @implements(write_note)
    def note(self, input: NoteIn, call: CallContext) -> Note:
        return Note(note_id=f"note-for-{input.letter_id}")

    def _record(self, effect: AppliedEffect) -> None:
        super()._record(effect)
        self._timeout(effect.op, "after")


post = Connector("post", ops=[post_letter, post_card, write_note], driver=PostDriver, fake=FakePost)


class MailOut(BaseModel):
    to: str = "ann@example.com"
    card: bool = False


@workflow(name="mail-out", input=MailOut, uses=[post_letter, post_card, write_note])
def mail_out(ctx: Context, input: MailOut) -> dict[str, Any]:
    address = ctx.step("address", lambda: input.to.strip().lower(), output=str)
    sent = ctx.call(post_card if input.card else post_letter, to=address, text="your invoice")
    noted = ctx.call(write_note, letter_id=sent.letter_id)
    return {"letter": sent.letter_id, "pages": sent.pages, "note": noted.note_id}


@workflow(name="mail-out-async", input=MailOut, uses=[post_letter, write_note])
async def mail_out_async(ctx: AsyncContext, input: MailOut) -> dict[str, Any]:
    sent = await ctx.call(post_letter, to=input.to, text="your invoice")
    noted = await ctx.call(write_note, letter_id=sent.letter_id)
    return {"letter": sent.letter_id, "note": noted.note_id}


def make_app() -> App:
    return App(name="post-desk", workflows=[mail_out, mail_out_async], connectors=[post])


def fake(harness: Harness) -> FakePost:
    return harness.fake("post", FakePost)


def calls_of(harness: Harness, op_id: str) -> list[str]:
    return [key for called, key in fake(harness).calls if called == op_id]


def reconciler(harness: Harness) -> Reconciler:
    return Reconciler(
        harness.run_store,
        harness.worker.client,
        version=harness.app.version,
        live_versions=harness.worker.live_versions,
        tasks=TaskOpener(harness.worker.db, harness.app.name),
    )


def test_an_uncertain_write_waits_at_one_task_and_done_carries_the_run_on(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {})
        task = harness.task(run.run_id)

        key = f"{run.run_id}:2"
        assert (task.op_id, task.idempotency_key, task.status) == (post_letter.id, key, "open")
        assert task.run_id == run.run_id
        assert task.workflow_id == f"{run.run_id}:1"
        assert "post.letters.send" in task.title
        assert harness.runs.get(run.run_id).status == "waiting"
        row = harness.ledger_store.get(key)
        assert row is not None
        assert row.status == "uncertain"
        assert task.id in (row.error or "")
        assert calls_of(harness, post_letter.id) == [key]
        # A reconciler pass finds the row already uncertain: no second task, nothing reported.
        assert reconciler(harness).run_pass().actions == []
        assert [t.id for t in harness.tasks.list()] == [task.id]

        # The letter did go out (the vendor acted before its answer was lost): say so.
        applied = fake(harness).effects_of(post_letter)[0].output
        resolved = harness.resolve(task.id, done=True, output=applied, by="user:ann")
        assert resolved.resumed_workflow_id == f"{run.run_id}:2"
        assert (resolved.status, resolved.then, resolved.replayed) == ("done", "continue", False)
        done = harness.wait(run.run_id)

        assert done.status == "done", done.error
        assert done.output == {"letter": "lt_1", "pages": 1, "note": "note-for-lt_1"}
        assert done.attempt == 2
        # The letter was not sent again; the note used the output the person gave.
        assert calls_of(harness, post_letter.id) == [key]
        assert len(fake(harness).effects_of(post_letter)) == 1
        assert [e.input for e in fake(harness).effects_of(write_note)] == [{"letter_id": "lt_1"}]
        assert [(r.op_id, r.status) for r in harness.ledger(run.run_id)] == [
            (post_letter.id, "ok"),
            (write_note.id, "ok"),
        ]
        after = harness.tasks.get(task.id)
        assert (after.status, after.resolved_by, after.output) == ("done", "user:ann", applied)
        assert after.resumed_workflow_id == f"{run.run_id}:2"
        assert [a["action"] for a in harness.tasks.audit(task.id)] == ["task.done"]
        # The step before the call was copied, not run again; the call's own step read the
        # answer from the ledger.
        first, second = harness.steps(run.run_id, 1), harness.steps(run.run_id, 2)
        assert [s["function_name"] for s in second] == ["address", post_letter.id, write_note.id]
        assert second[0]["started_at_epoch_ms"] == first[0]["started_at_epoch_ms"]


def test_a_task_shows_what_its_call_was_sent_with_secrets_redacted(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the secret key file is made here
    harness = Harness(make_app(), database_url=database_url)
    harness.worker.db.prepare()
    key = SecretKey.from_settings(harness.worker.settings)
    Secrets(harness.worker.db, "post-desk", key).set("POST_PIN", "pin-4242-never-shown", by="x:y")
    with harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {"to": "pin-4242-never-shown@example.com"})
        task = harness.task(run.run_id)

        assert task.input == {"to": "[redacted:POST_PIN]@example.com", "text": "your invoice"}
        assert harness.tasks.list()[0].input == task.input
        _, token = harness.client.services.tokens.create("user:ann", by="user:sam")
        api = create_api(harness.client, allowed_hosts=["testserver"])
        with TestClient(api, headers={"Authorization": f"Bearer {token}"}) as http:
            assert http.get(f"/tasks/{task.id}").json()["input"] == task.input
            assert [t["input"] for t in http.get("/tasks").json()] == [task.input]
        # A write that can be repeated keeps no copy: its task never asks about it.
        with harness.worker.db.engine.connect() as conn:
            kept = conn.execute(sa.select(call_inputs.c.idempotency_key)).scalars().all()
        assert kept == [task.idempotency_key]


def test_an_async_workflow_waits_and_carries_on_the_same_way(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out-async", {})
        task = harness.task(run.run_id)
        harness.resolve(task.id, done=True, output={"letter_id": "lt_by_hand", "pages": 2})
        done = harness.wait(run.run_id)
        assert done.status == "done", done.error
        assert done.output == {"letter": "lt_by_hand", "note": "note-for-lt_by_hand"}
        assert calls_of(harness, post_letter.id) == [f"{run.run_id}:1"]


class LoseUncertainAnswer(Database):
    """A database whose first `uncertain` write commits and then reports a lost connection,
    outside remit's own retries: the op's step fails after the task is open, and DBOS runs the
    step again, which re-enters the call through the ledger."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lost: list[str] = []

    def retrying(self, what: str, fn: Callable[[], T]) -> T:
        result = super().retrying(what, fn)
        if what.endswith(": uncertain") and not self.lost:
            self.lost.append(what)
            raise sa.exc.OperationalError("COMMIT", {}, Exception("connection lost (simulated)"))
        return result


def test_a_call_re_entered_after_its_task_opened_opens_no_second_one(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        flaky = LoseUncertainAnswer(database_url)
        harness.worker.runtime.caller.tasks = TaskOpener(flaky, harness.app.name)
        try:
            fake(harness).lost[post_letter.id] = ["after"]
            run = harness.start("mail-out", {})
            task = harness.task(run.run_id)
        finally:
            flaky.dispose()
        key = f"{run.run_id}:2"
        assert flaky.lost == [f"ledger {key}: uncertain"]
        # The step ran twice (the second time through the ledger): one call, one task.
        assert calls_of(harness, post_letter.id) == [key]
        assert [t.id for t in harness.tasks.list()] == [task.id]
        assert harness.runs.get(run.run_id).status == "waiting"

        harness.resolve(task.id, done=True, output={"letter_id": "lt_1"})
        assert harness.wait(run.run_id).status == "done"
        assert calls_of(harness, post_letter.id) == [key]


def test_not_done_on_a_retry_op_calls_it_again_once_with_the_same_key(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_card.id] = ["before"]
        run = harness.start("mail-out", {"card": True})
        task = harness.task(run.run_id)
        key = f"{run.run_id}:2"
        assert fake(harness).effects_of(post_card) == []

        resolved = harness.resolve(task.id, done=False, by="user:bob")
        assert (resolved.status, resolved.then) == ("not_done", "retry")
        done = harness.wait(run.run_id)

        assert done.status == "done", done.error
        assert done.output == {"letter": "cd_1", "pages": 1, "note": "note-for-cd_1"}
        assert calls_of(harness, post_card.id) == [key, key]
        assert len(fake(harness).effects_of(post_card)) == 1
        card = harness.ledger(run.run_id)[0]
        assert (card.op_id, card.status, card.attempt, card.tries) == (post_card.id, "ok", 2, 1)
        assert harness.tasks.get(task.id).status == "not_done"


def test_a_retried_call_cut_off_again_reopens_the_same_task(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_card.id] = ["before", "after"]
        run = harness.start("mail-out", {"card": True})
        first = harness.task(run.run_id)
        harness.resolve(first.id, done=False)
        harness.wait_moved(run.run_id, 1)
        again = harness.task(run.run_id)

        assert again.id == first.id
        assert (again.status, again.workflow_id) == ("open", f"{run.run_id}:2")
        assert again.resolved_by is None
        assert [a["action"] for a in harness.tasks.audit(first.id)] == [
            "task.not_done",
            "task.reopened",
        ]
        assert len(harness.tasks.list()) == 1

        applied = fake(harness).effects_of(post_card)[0].output
        harness.resolve(again.id, done=True, output=applied)
        done = harness.wait(run.run_id)
        assert done.status == "done", done.error
        assert done.output is not None
        assert done.output["letter"] == applied["letter_id"]
        key = f"{run.run_id}:2"
        assert calls_of(harness, post_card.id) == [key, key]
        assert len(fake(harness).effects_of(post_card)) == 1


def test_not_done_on_a_fail_op_fails_the_run_saying_so(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["before"]
        run = harness.start("mail-out", {})
        task = harness.task(run.run_id)

        resolved = harness.resolve(task.id, done=False, by="user:bob")
        assert (resolved.status, resolved.then) == ("not_done", "fail")
        failed = harness.wait(run.run_id)

        assert failed.status == "failed"
        assert "did not happen, as user:bob confirmed" in (failed.error or "")
        assert 'on_not_done="fail"' in (failed.error or "")
        assert calls_of(harness, post_letter.id) == [f"{run.run_id}:2"]
        assert fake(harness).effects_of(write_note) == []
        (row,) = harness.ledger(run.run_id)
        assert row.status == "failed"
        assert "did not happen, as user:bob confirmed" in (row.error or "")


def test_a_resolution_is_refused_with_every_reason_and_writes_nothing(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {})
        task = harness.task(run.run_id)

        with pytest.raises(TaskRefused) as bad_output:
            harness.resolve(task.id, done=True, output={"letter_id": 7, "pages": "many"})
        reasons = bad_output.value.reasons
        assert not bad_output.value.by_policy  # a request to fix: 409 over HTTP
        assert len(reasons) == 2
        assert "`letter_id`: Input should be a valid string" in reasons[0]
        assert "`pages`: Input should be a valid integer" in reasons[1]
        assert "as Letter (the output of `post.letters.send`)" in reasons[0]

        with pytest.raises(TaskRefused) as missing:
            harness.resolve(task.id, done=True)
        assert "`letter_id`: Field required" in str(missing.value)

        with pytest.raises(TaskRefused) as output_not_done:
            harness.resolve(task.id, done=False, output={"letter_id": "lt_1"})
        assert "an output goes with done only" in str(output_not_done.value)

        with pytest.raises(TaskRefused) as unknown:
            harness.resolve("tsk_nope", done=True, output={"letter_id": "lt_1"})
        assert "there is no task tsk_nope" in str(unknown.value)

        with pytest.raises(TaskRefused) as system:
            harness.resolve(task.id, done=False, by="remit:expiry")
        assert "principals are remit's own" in str(system.value)

        # Nothing was written: the task is open, the run waits, the row is still uncertain.
        assert harness.tasks.get(task.id).status == "open"
        assert harness.tasks.audit(task.id) == []
        assert harness.runs.get(run.run_id).status == "waiting"
        row = harness.ledger_store.get(f"{run.run_id}:2")
        assert row is not None
        assert row.status == "uncertain"

        first = harness.resolve(task.id, done=True, output={"letter_id": "lt_1"}, key="k-1")
        # The same key again replays the first answer; another answer, or no key, is refused.
        again = harness.resolve(task.id, done=True, output={"letter_id": "lt_1"}, key="k-1")
        assert again.replayed
        assert (again.status, again.resumed_workflow_id) == ("done", first.resumed_workflow_id)
        with pytest.raises(TaskRefused) as twice:
            harness.resolve(task.id, done=False)
        assert "already resolved done by user:test" in str(twice.value)
        # The key names that one request: another answer, another output or someone else's
        # answer under it is refused, naming the first (someone else's would skip the policies).
        first_request = f"key 'k-1' was first used to answer task {task.id} done as user:test"
        with pytest.raises(KeyReused, match=first_request):
            harness.resolve(task.id, done=False, key="k-1")
        with pytest.raises(KeyReused, match=first_request):
            harness.resolve(task.id, done=True, output={"letter_id": "lt_forged"}, key="k-1")
        with pytest.raises(KeyReused, match=first_request):
            harness.resolve(
                task.id, done=True, output={"letter_id": "lt_1"}, key="k-1", by="user:eve"
            )

        assert harness.wait(run.run_id).status == "done"
        assert harness.runs.get(run.run_id).attempt == 2
        assert [a["action"] for a in harness.tasks.audit(task.id)] == ["task.done"]


def test_a_write_cut_off_in_a_finished_run_opens_one_task_that_only_records(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("mail-out", {})
        assert run.status == "done", run.error
        key = f"{run.run_id}:2"
        # The window: the letter was posted, the worker died before recording the outcome,
        # and the run ended without coming back to the call (it was cancelled, say).
        with harness.worker.db.begin() as conn:
            conn.execute(
                ledger_table.update()
                .where(ledger_table.c.idempotency_key == key)
                .values(status="started", finished_at=None, output=None)
            )

        # Two passes at once, then one more: one task, reported once.
        reports = []
        passes = [
            threading.Thread(target=lambda: reports.append(reconciler(harness).run_pass()))
            for _ in range(2)
        ]
        for each in passes:
            each.start()
        for each in passes:
            each.join()
        reports.append(reconciler(harness).run_pass())

        actions = [a for report in reports for a in report.actions]
        assert [(a.kind, a.run_id) for a in actions] == [("uncertain", run.run_id)]
        assert all(not report.errors for report in reports)
        (task,) = harness.tasks.list()
        assert (task.idempotency_key, task.status) == (key, "open")
        assert (task.workflow_id, task.step_id) == (f"{run.run_id}:1", 2)
        assert task.id in actions[0].reason
        # Opened by the reconciler, away from the call, it still shows what the call was sent.
        assert task.input == {"to": "ann@example.com", "text": "your invoice"}
        row = harness.ledger_store.get(key)
        assert row is not None
        assert row.status == "uncertain"
        assert "was never recorded" in (row.error or "")

        resolved = harness.resolve(task.id, done=True, output={"letter_id": "lt_1"})
        assert resolved.resumed_workflow_id is None
        assert harness.runs.get(run.run_id).attempt == 1
        row = harness.ledger_store.get(key)
        assert row is not None
        assert (row.status, row.output) == ("ok", {"letter_id": "lt_1", "pages": 1})


def test_a_write_left_started_in_a_waiting_run_opens_its_task(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {})
        waited = harness.task(run.run_id)
        # The window: the waiting run's attempt had also started two more writes (an async
        # workflow's, say) and its process died before recording either outcome.
        now = harness.worker.runtime.clock.now()
        with harness.worker.db.begin() as conn:
            for step, idempotent in ((4, False), (5, True)):
                conn.execute(
                    ledger_table.insert().values(
                        run_id=run.run_id,
                        attempt=1,
                        step_id=step,
                        op_id=write_note.id if idempotent else post_letter.id,
                        effect="write",
                        idempotent=idempotent,
                        idempotency_key=f"{run.run_id}:{step}",
                        input_hash="-",
                        status="started",
                        tries=0,
                        actor="user:test",
                        started_at=now,
                    )
                )

        report = reconciler(harness).run_pass()

        # The non-idempotent one opens a task; the idempotent one is called again, with its
        # key, by whichever attempt reaches it.
        assert [(a.kind, a.workflow_id) for a in report.actions] == [
            ("uncertain", f"{run.run_id}:1")
        ]
        cut = [t for t in harness.tasks.list(status="open") if t.id != waited.id]
        assert [(t.idempotency_key, t.workflow_id, t.step_id) for t in cut] == [
            (f"{run.run_id}:4", f"{run.run_id}:1", 4)
        ]
        idempotent = harness.ledger_store.get(f"{run.run_id}:5")
        assert idempotent is not None
        assert idempotent.status == "started"
        assert reconciler(harness).run_pass().actions == []

        # Answering the task the run waits at carries it on; the other one, which no attempt
        # reaches again once the run is done, then records only.
        harness.resolve(waited.id, done=True, output={"letter_id": "lt_1"})
        assert harness.wait(run.run_id).status == "done"
        assert harness.resolve(cut[0].id, done=False).resumed_workflow_id is None
        assert harness.runs.get(run.run_id).attempt == 2


def test_a_direct_call_whose_outcome_is_unknown_opens_a_task_that_records(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        called = harness.call(post_letter.id, {"to": "ann@example.com", "text": "hi"}, key="one")
        assert called.status == "failed"
        (task,) = harness.tasks.list()
        assert task.id in (called.error or "")
        assert task.idempotency_key == "direct:one"

        resolved = harness.resolve(task.id, done=True, output={"letter_id": "lt_1"})
        assert resolved.resumed_workflow_id is None
        again = harness.call(post_letter.id, {"to": "ann@example.com", "text": "hi"}, key="one")
        assert (again.status, again.output, again.replayed) == (
            "ok",
            {"letter_id": "lt_1", "pages": 1},
            True,
        )
        assert len(calls_of(harness, post_letter.id)) == 1


def test_the_policies_refuse_an_answer_among_every_reason_and_each_refusal_is_recorded(
    database_url: str, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "tasks.cedar").write_text(
        'permit (principal, action == Action::"start", resource);\n'
        'permit (principal == User::"carol", action == Action::"resolve", resource);\n'
    )
    app = make_app()
    app.use_policies(policies)
    with Harness(app, database_url=database_url, actor="user:ann") as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {})
        task = harness.task(run.run_id)
        denial = 'user:ann may not resolve Op::"post.letters.send": no policy permits it'

        with pytest.raises(TaskRefused) as with_others:
            harness.resolve(task.id, done=True, output={"letter_id": 7})
        assert "`letter_id`: Input should be a valid string" in with_others.value.reasons[0]
        assert with_others.value.reasons[-1] == denial
        with pytest.raises(TaskRefused) as alone:
            harness.resolve(task.id, done=True, output={"letter_id": "lt_1"}, key="k-1")
        assert alone.value.reasons == [denial]

        # Nothing was written: the task is open, the run waits, the row is still uncertain.
        assert harness.tasks.get(task.id).status == "open"
        assert harness.tasks.audit(task.id) == []
        assert harness.runs.get(run.run_id).status == "waiting"
        row = harness.ledger_store.get(f"{run.run_id}:2")
        assert row is not None
        assert row.status == "uncertain"
        # Each refusal is recorded once, as a refused decision is: with what was answered.
        recorded = harness.client.services.guard.denials()
        assert [(d.principal, d.action, d.resource, d.reason) for d in recorded] == [
            ("user:ann", "resolve", post_letter.id, "no policy permits it")
        ] * 2
        assert recorded[0].context == {
            "done": True,
            "workflow": "mail-out",
            "input": {"to": "ann@example.com", "card": False},
            "task": task.id,
        }

        # The key of a refused answer wrote nothing either: another principal may use it.
        resolved = harness.resolve(
            task.id, done=True, output={"letter_id": "lt_1"}, by="user:carol", key="k-1"
        )
        assert resolved.resumed_workflow_id == f"{run.run_id}:2"
        assert harness.wait(run.run_id).status == "done"
        assert len(harness.client.services.guard.denials()) == 2


def test_answers_given_at_once_resolve_the_task_once_and_resume_the_run_once(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        fake(harness).lost[post_letter.id] = ["after"]
        run = harness.start("mail-out", {})
        task = harness.task(run.run_id)
        # Three callers give one answer under one key; three others each their own.
        keys = ["same", "same", "same", "own-1", "own-2", "own-3"]
        start = threading.Barrier(len(keys))
        outcomes: dict[int, Resolved | Exception] = {}

        def answer(n: int) -> None:
            start.wait(timeout=30)
            try:
                outcomes[n] = harness.resolve(
                    task.id,
                    done=n % 2 == 0,
                    output=None if n % 2 else {"letter_id": "lt_1"},
                    key=keys[n],
                )
            except Exception as error:
                outcomes[n] = error

        threads = [threading.Thread(target=answer, args=(n,)) for n in range(len(keys))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        after = harness.tasks.get(task.id)
        done = harness.wait(run.run_id)

        resolved = {n: o for n, o in outcomes.items() if isinstance(o, Resolved)}
        refused = {n: o for n, o in outcomes.items() if not isinstance(o, Resolved)}
        [first] = [n for n, o in resolved.items() if not o.replayed]
        # A caller asking the other answer under the winning key is refused as a key reused
        # for another request, or as a task already resolved: whichever it meets first.
        assert all(
            isinstance(o, TaskRefused) or (isinstance(o, KeyReused) and keys[n] == keys[first])
            for n, o in refused.items()
        ), refused
        assert after.resolve_key == keys[first]
        assert after.status == ("done" if first % 2 == 0 else "not_done")
        # Only callers of the winning key were given its answer (one asking the other answer
        # under it is refused); every other caller was refused.
        assert all(keys[n] == keys[first] for n in resolved)
        assert {o.resumed_workflow_id for o in resolved.values()} == {f"{run.run_id}:2"}
        assert [a["action"] for a in harness.tasks.audit(task.id)] == [f"task.{after.status}"]
        # The run moved on once, to attempt 2, and the outbox holds nothing. (Not done fails the
        # run: the op declares on_not_done="fail".)
        assert done.status == ("done" if after.status == "done" else "failed"), done.error
        assert done.attempt == 2
        with harness.worker.db.engine.connect() as conn:
            assert list(conn.execute(sa.select(resumes))) == []
