"""A `RunHandle` carries the verbs for its one run: wait for it, read its output, cancel it,
retry it, each as the client's verb of the same name does."""

from __future__ import annotations

import pytest

from remit import DriverError
from remit.testing import Harness
from tests.support import FakeShop, create_order, make_app


@pytest.fixture
def shop() -> FakeShop:
    return FakeShop()


def test_a_handle_cancels_its_run_and_the_gate_it_waits_at(
    database_url: str, shop: FakeShop
) -> None:
    with Harness(make_app(), database_url=database_url, implementations={"shop": shop}) as h:
        handle = h.client.runs.start("refund", {"sku": "sku-1", "quantity": 2})
        assert handle.wait(timeout=30, until=["waiting"]).status == "waiting"

        cancelled = handle.cancel(by="user:ops")

        assert (cancelled.run_id, cancelled.status) == (handle.run_id, "cancelled")
        assert handle.get().status == "cancelled"
        (gate,) = h.approvals.list(run_id=handle.run_id)
        assert (gate.status, gate.decided_by) == ("cancelled", "user:ops")
        assert handle.cancel().updated_at == cancelled.updated_at  # finished: left as it is


def test_a_handle_retries_its_failed_run_which_then_finishes(
    database_url: str, shop: FakeShop
) -> None:
    with Harness(make_app(), database_url=database_url, implementations={"shop": shop}) as h:
        shop.failures[create_order.id].append(DriverError("no stock", retryable=False, status=409))
        handle = h.client.runs.start("purchase", {"sku": "sku-1", "quantity": 1})
        failed = handle.wait(timeout=30)
        assert (failed.status, failed.attempt) == ("failed", 1), failed.error

        retried = handle.retry(key="again")

        assert (retried.run_id, retried.attempt, retried.replayed) == (handle.run_id, 2, False)
        done = handle.wait(timeout=30)
        assert (done.status, done.attempt) == ("done", 2), done.error
        assert handle.output(timeout=1).order_id == done.output["order_id"]
        assert handle.retry(key="again").replayed  # the same key: the first retry's answer
