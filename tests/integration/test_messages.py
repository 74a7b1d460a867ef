"""Runs that wait for messages (`ctx.wait_for`, `client.send`) and publish state, on a real
worker: a message moves a waiting run on once, in order, and nothing before the wait runs
again."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from remit.core.errors import KeyReused, SendRefused
from remit.testing import Harness, ManualClock
from tests.waits_app import FakeShop, make_waits_app


def test_a_run_waits_for_a_message_and_carries_on_with_it(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("await-payment", {})
        waiting = h.wait(run.run_id, until=("waiting",))
        assert waiting.status == "waiting"
        h.wait_attempt_ended(run.run_id, 1)
        (wait,) = h.client.runs.waiting(run.run_id)
        assert (wait.kind, wait.topic, wait.deadline) == ("message", "paid", None)

        sent = h.client.send(run.run_id, "paid", {"amount": "120.00", "reference": "pi_1"})
        assert sent.resumed_workflow_id == f"{run.run_id}:2"
        done = h.wait(run.run_id)

        assert done.status == "done", done.error
        assert done.output == {"paid": "120.00", "reference": "pi_1", "order": "ord_1"}
        shop = h.fake("shop", FakeShop)
        assert (shop.reads, shop.orders) == (1, 1)  # the read before the wait ran once
        (message,) = h.client.runs.messages(run.run_id)
        assert (message.status, message.topic, message.sent_by) == ("taken", "paid", "user:test")
        assert h.client.runs.waiting(run.run_id) == []


def test_a_message_sent_before_the_wait_is_kept_and_taken_at_once(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("collect", {"count": 3})
        h.client.send(run.run_id, "item", {"n": 1})
        h.client.send(run.run_id, "item", {"n": 2})
        h.client.send(run.run_id, "other", {"n": 0})
        h.wait(run.run_id, until=("waiting",))
        h.client.send(run.run_id, "item", {"n": 3})
        done = h.wait(run.run_id)
        assert done.status == "done", done.error
        assert done.output == [{"n": 1}, {"n": 2}, {"n": 3}]
        statuses = [(m.topic, m.status) for m in h.client.runs.messages(run.run_id)]
        assert statuses == [
            ("item", "taken"),
            ("item", "taken"),
            ("other", "queued"),
            ("item", "taken"),
        ]


def test_a_repeated_key_replays_and_a_reused_key_is_refused(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("collect", {"count": 2})
        first = h.client.send(run.run_id, "item", {"n": 1}, key="k1")
        again = h.client.send(run.run_id, "item", {"n": 1}, key="k1")
        assert (again.seq, again.replayed) == (first.seq, True)
        with pytest.raises(KeyReused, match="message key 'k1'"):
            h.client.send(run.run_id, "item", {"n": 2}, key="k1")
        h.client.send(run.run_id, "item", {"n": 2}, key="k2")
        done = h.wait(run.run_id)
        assert done.output == [{"n": 1}, {"n": 2}]
        assert len(h.client.runs.messages(run.run_id)) == 2
        with pytest.raises(SendRefused, match="is done"):
            h.client.send(run.run_id, "item", {"n": 3})


def test_a_payload_that_does_not_parse_fails_the_wait_and_is_kept(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("await-payment", {})
        h.wait(run.run_id, until=("waiting",))
        h.client.send(run.run_id, "paid", {"amount": "lots", "reference": "pi_1"})
        failed = h.wait(run.run_id)
        assert failed.status == "failed"
        assert "amount" in (failed.error or "")
        (message,) = h.client.runs.messages(run.run_id)
        assert message.status == "refused"
        assert "amount" in (message.error or "")

        # Retried, the run waits again at its wait, for a message that parses.
        h.client.runs.retry(run.run_id)
        h.wait(run.run_id, until=("waiting",))
        h.client.send(run.run_id, "paid", {"amount": "12", "reference": "pi_2"})
        done = h.wait(run.run_id)
        assert (done.status, done.output["paid"]) == ("done", "12"), done.error
        assert h.fake("shop", FakeShop).reads == 1
        statuses = [m.status for m in h.client.runs.messages(run.run_id)]
        assert statuses == ["refused", "taken"]


def test_a_wait_times_out_at_its_deadline(database_url: str) -> None:
    clock = ManualClock()
    with Harness(
        make_waits_app(), database_url=database_url, clock=clock, sweep_interval=0.02
    ) as h:
        run = h.start("await-payment", {"timeout": 3 * 86400})
        h.wait(run.run_id, until=("waiting",))
        (wait,) = h.client.runs.waiting(run.run_id)
        assert wait.deadline == clock.now() + timedelta(days=3)
        (due,) = h.deadlines()
        assert (due.kind, due.run_id, due.target, due.at) == (
            "message",
            run.run_id,
            "paid",
            wait.deadline,
        )
        assert due.describe() == f"run {run.run_id} stops waiting for a message on `paid`"
        clock.advance(days=2)
        time.sleep(0.1)
        assert h.run_store.get(run.run_id).status == "waiting"
        clock.advance(days=1)
        done = h.wait(run.run_id)
        assert (done.status, done.output, done.attempt) == ("done", {"paid": None}, 2)
        assert h.fake("shop", FakeShop).reads == 1
        assert h.deadlines() == []


def test_a_wait_keeps_its_deadline_across_a_restart(database_url: str) -> None:
    clock = ManualClock()
    app = make_waits_app()
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        run = h.start("await-payment", {"timeout": 86400})
        h.wait(run.run_id, until=("waiting",))
        h.wait_attempt_ended(run.run_id, 1)
        (before,) = h.deadlines()
    clock.advance(hours=12)
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        (after,) = h.deadlines()
        assert after == before
        # A message sent while it waits is taken, and its deadline is gone with the wait.
        h.client.send(run.run_id, "paid", {"amount": "1", "reference": "r"})
        assert h.wait(run.run_id).output["paid"] == "1"
        assert h.deadlines() == []


def test_an_async_run_waits_the_same_way(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("await-payment-async", {})
        h.wait(run.run_id, until=("waiting",))
        h.client.send(run.run_id, "paid", {"amount": "5", "reference": "r"})
        done = h.wait(run.run_id)
        assert (done.status, done.output) == ("done", {"paid": "5"})


def test_published_state_is_read_while_the_run_waits(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("quote", {"amount": 40})
        h.wait(run.run_id, until=("waiting",))
        assert h.client.state(run.run_id) == {"quote": {"amount": 40, "status": "open"}}
        h.client.send(run.run_id, "answer", "accepted")
        done = h.wait(run.run_id)
        assert done.output == "accepted"
        # The first publish was copied by the resume, not run again: its value is the latest.
        assert h.client.state(run.run_id) == {"quote": {"amount": 40, "status": "accepted"}}
