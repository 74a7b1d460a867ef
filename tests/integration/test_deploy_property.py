"""A model of deploys under waiting runs: random workflows of steps, ops, gates and sleeps, each
run to where it first waits on one version, then edited (an insertion, plain or behind
`ctx.patch`, a removal, a rename or a swap, before or after that point) and resumed on the next.

Every run either finishes without anything it had run running again, or fails before running
anything new; and `remit deploy check`, asked before the resume, named exactly the runs that
fail, with their messages.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.core.database import Database
from remit.ops.deploy import DeployCheck
from remit.testing import Harness, ManualClock
from tests.support import REFUND, FakeShop, RefundDraft, create_order, shop

# Half a minute or more of generated deploys: `make check` leaves these to `make test`.
pytestmark = pytest.mark.slow

# (run_id, label) of every step body that ran, in this process.
RAN: list[tuple[str, str]] = []
_labels = itertools.count()


@dataclass(frozen=True)
class Do:
    """One instruction: a `ctx.step`, an op call (keyed or not), a short sleep, a gate, a long
    sleep, or any of those behind `ctx.patch`."""

    kind: str
    label: str
    patched: bool = False


def _perform(ctx: Context, do: Do) -> None:
    if do.patched and not ctx.patch(f"p-{do.label}"):
        return
    if do.kind == "step":
        ctx.step(do.label, lambda: RAN.append((ctx.run_id, do.label)))
    elif do.kind == "op":
        ctx.call(create_order, sku=do.label, quantity=1)
    elif do.kind == "keyed":
        ctx.call(create_order, sku=do.label, quantity=1, key=do.label)
    elif do.kind == "nap":
        ctx.sleep(0.01)  # short: DBOS's own sleep, in the thread
    elif do.kind == "gate":
        draft = RefundDraft(sku=do.label, quantity=1)
        ctx.approval(do.label, type="refund", title=do.label, draft=draft)
    else:
        ctx.sleep(3600)


class Empty(BaseModel):
    pass


def _workflow(name: str, program: list[Do]) -> Any:
    @workflow(name=name, input=Empty, uses=[create_order])
    def body(ctx: Context, input: Empty) -> int:
        for do in program:
            _perform(ctx, do)
        return len(program)

    return body


def _fresh(kind: str) -> Do:
    return Do(kind, f"l{next(_labels)}")


kinds = st.sampled_from(["step", "op", "keyed", "nap"])
waiters = st.sampled_from(["gate", "sleep"])


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Do], list[Do]]:
    """A first version (steps, a waiter, steps) and its edited second version."""
    before = [_fresh(k) for k in draw(st.lists(kinds, max_size=3))]
    after = [_fresh(k) for k in draw(st.lists(st.one_of(kinds, waiters), max_size=2))]
    v1 = [*before, _fresh(draw(waiters)), *after]
    v2 = list(v1)
    edit = draw(st.sampled_from(["none", "insert", "patched", "remove", "rename", "swap"]))
    at = draw(st.integers(0, len(v1) - 1))
    if edit == "insert":
        v2.insert(at, _fresh(draw(st.one_of(kinds, waiters))))
    elif edit == "patched":
        new = _fresh(draw(st.one_of(kinds, waiters)))
        v2.insert(at, Do(new.kind, new.label, patched=True))
    elif edit == "remove":
        del v2[at]
    elif edit == "rename":
        v2[at] = Do(v2[at].kind, f"l{next(_labels)}")
    elif edit == "swap" and at + 1 < len(v2):
        v2[at], v2[at + 1] = v2[at + 1], v2[at]
    return v1, v2


def _ops(fake: FakeShop, run_id: str) -> list[str]:
    return [e.input["sku"] for e in fake.effects if e.idempotency_key.startswith(run_id + ":")]


def _app(programs: list[list[Do]], tag: str) -> App:
    flows = [_workflow(f"prog-{tag}-{i}", program) for i, program in enumerate(programs)]
    return App(name="shop", workflows=flows, connectors=[shop], approvals=[REFUND])


_examples = itertools.count()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(cases(), min_size=4, max_size=6))
def test_a_run_finishes_untouched_or_fails_first_and_the_check_says_which(
    database_url: str, programs: list[tuple[list[Do], list[Do]]]
) -> None:
    tag = str(next(_examples))
    clock = ManualClock()
    v1 = _app([first for first, _ in programs], tag)
    v2 = _app([second for _, second in programs], tag)
    with Harness(v1, database_url=database_url, clock=clock) as h:
        fake = h.fake("shop", FakeShop)
        run_ids = [h.start(f"prog-{tag}-{i}", {}).run_id for i in range(len(programs))]
        for run_id in run_ids:
            assert h.wait(run_id, until=("waiting", "sleeping")).status in ("waiting", "sleeping")
    ran_before = {run_id: {label for r, label in RAN if r == run_id} for run_id in run_ids}
    ops_before = {run_id: _ops(fake, run_id) for run_id in run_ids}

    db = Database(database_url)
    client = db.client("shop")
    try:
        report = DeployCheck(v2, db, client).run(run_ids)
    finally:
        client.destroy()
        db.dispose()
    predicted = {check.run_id: check.failure for check in report.checked}
    assert set(predicted) == set(run_ids)

    clock.advance(seconds=3601)
    with Harness(
        v2,
        database_url=database_url,
        clock=clock,
        sweep_interval=0.05,
        implementations={"shop": fake},
    ) as h:
        ended = {}
        for run_id in run_ids:
            while (run := h.wait(run_id, until=("waiting", "sleeping"))).status in (
                "waiting",
                "sleeping",
            ):
                for gate in h.approvals.list(run_id=run_id, status="pending"):
                    h.decide(gate.id, "approved")
                clock.advance(seconds=3601)
                h.wait_moved(run_id, run.attempt)
            ended[run_id] = run

    for (first, second), run_id in zip(programs, run_ids, strict=True):
        run = ended[run_id]
        ran_after = [label for r, label in RAN if r == run_id and label not in ran_before[run_id]]
        again = [label for r, label in RAN if r == run_id].count
        new_ops = _ops(fake, run_id)[len(ops_before[run_id]) :]
        where = f"{run_id}: {first} -> {second}"
        event(f"the run {'failed' if run.status == 'failed' else 'carried on'}")
        assert run.status in ("done", "failed"), where
        if run.status == "failed":
            # It failed before running anything new, and the check said so, in the same words.
            assert (ran_after, new_ops) == ([], []), where
            assert predicted[run_id] == run.error, where
        else:
            assert predicted[run_id] is None, (where, predicted[run_id])
        # Nothing it had run ran again: no step body twice, no op call made twice.
        assert all(again(label) == 1 for label in ran_before[run_id]), where
        assert not set(new_ops) & set(ops_before[run_id]), where
