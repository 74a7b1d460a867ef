"""`decide()` raced by many threads and driven by random call sequences: one decision per gate,
a repeated decision key returns the first result, a refused call writes nothing, a batch is
decided whole or not at all, and a decision racing a cancel resumes the run only if it came
first."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from remit import DecisionRefused, KeyReused
from remit.core.database import Database
from remit.core.runs import RunInfo, RunStore
from remit.core.schema import approvals, audit, decisions, resumes, runs
from remit.people.approvals import Approval, Approvals, Decided, DecideResult
from remit.people.ending import cancel_run
from remit.people.gates import Gates
from remit.testing import Harness
from tests.support import FakeShop, create_order, get_item, make_app

# --- Many threads at once -------------------------------------------------------------------

GATES = 10
THREADS = 20


@dataclass(frozen=True)
class Call:
    """One `decide()` call of the race: approve `quantities`' gates, each with its quantity."""

    key: str
    by: str
    quantities: Mapping[str, int]

    @property
    def ids(self) -> list[str]:
        return sorted(self.quantities)


def race_plan(ids: list[str]) -> list[list[Call]]:
    """Each thread's calls. Threads 2i and 2i+1 share the key `same-<i>` for gate i, and each
    also approves a batch of the next two gates under a key of its own: for even i both twins
    make the shared call first (racing each other and the odd twins' batches), for odd i both
    make their batch call first. Every call approves, so each run makes one order."""
    plan = []
    for t in range(THREADS):
        i = t // 2
        same = Call(f"same-{i}", f"user:same-{i}", {ids[i]: 100 + i})
        batch = Call(
            f"rival-{t}",
            f"user:rival-{t}",
            {ids[(i + 1) % GATES]: 1000 + 10 * t, ids[(i + 2) % GATES]: 1001 + 10 * t},
        )
        plan.append([same, batch] if i % 2 == 0 else [batch, same])
    return plan


def test_racing_deciders_decide_each_gate_once_and_resume_each_run_once(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url, threads=16) as h:
        run_ids = [h.start("refund", {"sku": "sku-1"}).run_id for _ in range(GATES)]
        gates = [h.gate(run_id) for run_id in run_ids]
        run_of = {gate.id: gate.run_id for gate in gates}
        plan = race_plan([gate.id for gate in gates])
        outcomes: list[tuple[Call, DecideResult | DecisionRefused]] = []
        lock = threading.Lock()
        start = threading.Barrier(THREADS)

        def decider(calls: list[Call]) -> None:
            start.wait(timeout=60)
            for call in calls:
                outcome: DecideResult | DecisionRefused
                try:
                    outcome = h.client.services.approvals.decide(
                        call.ids,
                        "approved",
                        by=call.by,
                        via="test",
                        decision_key=call.key,
                        edits={aid: {"quantity": q} for aid, q in call.quantities.items()},
                    )
                except DecisionRefused as refused:
                    outcome = refused
                with lock:
                    outcomes.append((call, outcome))

        with ThreadPoolExecutor(THREADS) as pool:
            for future in [pool.submit(decider, calls) for calls in plan]:
                future.result(timeout=180)
        finished = [h.wait(run_id, timeout=60) for run_id in run_ids]
        for run_id in run_ids:  # a run says `done` a moment before DBOS records its attempt's end
            h.worker.client.retrieve_workflow(f"{run_id}:2").get_result(polling_interval_sec=0.05)
        shop = h.fake("shop", FakeShop)
        attempts = {
            status.workflow_id: status.status
            for status in h.worker.client.list_workflows(load_input=False, load_output=False)
        }
        trail = {gate.id: h.approvals.audit(gate.id) for gate in gates}
        rows = {gate.id: h.approvals.get(gate.id) for gate in gates}
        with h.worker.db.engine.connect() as conn:
            decision_keys = set(conn.execute(sa.select(decisions.c.decision_key)).scalars())
            outbox = list(conn.execute(sa.select(resumes)))

    assert len(outcomes) == 2 * THREADS
    # Every call of a key had the same fate; the successful ones returned one result.
    by_key: dict[str, list[DecideResult | DecisionRefused]] = {}
    calls: dict[str, Call] = {}
    for call, outcome in outcomes:
        by_key.setdefault(call.key, []).append(outcome)
        calls[call.key] = call
    results: dict[str, DecideResult] = {}
    for key, seen in by_key.items():
        if all(isinstance(o, DecisionRefused) for o in seen):
            continue
        won = [o for o in seen if isinstance(o, DecideResult)]
        assert len(won) == len(seen), f"key {key}: {seen}"
        assert [o.replayed for o in won].count(False) == 1, f"key {key}: {seen}"
        assert all((o.batch_id, o.decided) == (won[0].batch_id, won[0].decided) for o in won)
        results[key] = won[0]

    # Exactly one decision per gate, the winner's, written with its one audit row.
    winner: dict[str, str] = {}
    for key, result in results.items():
        call = calls[key]
        assert result.decided == [
            Decided(aid, run_of[aid], "refund", "approved", f"{run_of[aid]}:2") for aid in call.ids
        ]
        assert (result.batch_id is None) == (len(call.ids) == 1)
        for aid in call.ids:
            assert aid not in winner, f"{aid} decided by both {winner[aid]} and {key}"
            winner[aid] = key
    assert sorted(winner) == sorted(run_of)
    assert decision_keys == set(results)
    assert outbox == []
    for aid, key in winner.items():
        row, call = rows[aid], calls[key]
        assert (row.status, row.decided_by, row.decision_key, row.batch_id) == (
            "approved",
            call.by,
            key,
            results[key].batch_id,
        )
        assert row.edited_draft_json == {
            "sku": "sku-1",
            "quantity": call.quantities[aid],
            "note": "",
        }
        assert row.resumed_workflow_id == f"{run_of[aid]}:2"
        assert [(a["action"], a["actor"], a["meta"]["decision_key"]) for a in trail[aid]] == [
            ("approval.approved", call.by, key)
        ]

    # Every loser was told who decided first.
    for call, outcome in outcomes:
        if isinstance(outcome, DecideResult):
            continue
        assert outcome.reasons, call
        for aid, message in outcome.reasons:
            assert aid in call.ids
            assert message == f"is already approved by {calls[winner[aid]].by}"

    # Each run resumed once, on attempt 2, and ordered the winner's quantity once.
    for run in finished:
        aid = next(aid for aid, run_id in run_of.items() if run_id == run.run_id)
        quantity = calls[winner[aid]].quantities[aid]
        assert run.status == "done", run.error
        assert (run.attempt, run.workflow_id) == (2, f"{run.run_id}:2")
        assert run.output is not None
        assert (run.output["status"], run.output["quantity"]) == ("approved", quantity)
        assert {wid: s for wid, s in attempts.items() if wid.startswith(f"{run.run_id}:")} == {
            f"{run.run_id}:1": "SUCCESS",
            f"{run.run_id}:2": "SUCCESS",
        }
    assert shop.orders == GATES
    assert sorted(e.input["quantity"] for e in shop.effects_of(create_order)) == sorted(
        calls[key].quantities[aid] for aid, key in winner.items()
    )
    assert Counter(op for op, _ in shop.calls) == {get_item.id: GATES, create_order.id: GATES}


# --- Random call sequences ------------------------------------------------------------------

PER_EXAMPLE = 3  # fresh gates for each example: a decision cannot be undone
MISSING = "apr_0000000000000000"
ASSIGNEE = "user:a"  # the first gate of each example is assigned to this actor
EDITS: dict[str, Any] = {
    "good": {"quantity": 5, "note": "edited"},
    "bad": {"quantity": "lots"},
    "unknown-field": {"amount": 5},
    "not-fields": "lots",
}


@dataclass(frozen=True)
class Step:
    """One drawn `decide()` call, in indexes into the example's gates. With `again`, it takes
    the previous call's gates and key (a client retrying), keeping its own decision and edits."""

    targets: frozenset[int]
    missing: bool
    decision: str
    key: int
    by: str
    edits: dict[int, str]
    again: bool


STEPS = st.builds(
    Step,
    targets=st.frozensets(st.integers(0, PER_EXAMPLE - 1), min_size=1),
    missing=st.sampled_from([False] * 7 + [True]),
    decision=st.sampled_from(("approved", "rejected")),
    key=st.integers(0, 3),
    by=st.sampled_from((ASSIGNEE, "user:b")),
    edits=st.one_of(
        st.just({}),
        st.dictionaries(
            st.integers(0, PER_EXAMPLE - 1), st.sampled_from(sorted(EDITS)), max_size=2
        ),
    ),
    again=st.sampled_from([False] * 3 + [True]),
)


class Desk:
    """Deciding with no worker: gates opened straight on runs that never run, and the real
    `decide()` with a DBOS client, which forks each resumed attempt onto a queue no one serves."""

    def __init__(self, url: str) -> None:
        self.app = make_app()
        self.db = Database(url, pool_size=2)
        self.db.prepare()
        self.client = self.db.client(self.app.name)
        self.runs = RunStore(self.db, app=self.app.name)
        self.gates = Gates(self.db, self.app.approval_types)
        self.approvals = Approvals(self.db, self.client, self.app.approval_types)

    def open_gates(self, n: int) -> list[Approval]:
        """`n` runs, each waiting at its own gate `refund` (the first assigned to ASSIGNEE)."""
        opened = []
        for i in range(n):
            run = self.runs.start(
                self.client, self.app.workflow("refund"), {"sku": "sku-1"}, started_by="user:t"
            )
            # What attempt 1 writes up to its gate: running, then waiting.
            assert self.runs.claim(run.run_id, run.workflow_id, self.app.version)
            assert self.runs.suspend(run.run_id, run.workflow_id, "waiting")
            row = self.gates.open(
                RunInfo(run.run_id, 1, run.workflow_id, "user:t"),
                2,
                key="refund",
                type="refund",
                title="Refund 1 x sku-1",
                draft={"sku": "sku-1", "quantity": 1, "note": ""},
                assignee=ASSIGNEE if i == 0 else None,
                expires_in=None,
            )
            opened.append(self.approvals.get(row["id"]))
        return opened

    def snapshot(self) -> dict[str, dict[str, str]]:
        """Every row `decide()` may write, by table and primary key, and DBOS's workflows."""
        tables = {
            approvals: "id",
            audit: "id",
            decisions: "decision_key",
            resumes: "workflow_id",
            runs: "run_id",
        }
        with self.db.engine.connect() as conn:
            snap = {
                table.name: {
                    str(row._mapping[pk]): json.dumps(
                        dict(row._mapping), default=str, sort_keys=True
                    )
                    for row in conn.execute(sa.select(table))
                }
                for table, pk in tables.items()
            }
        snap["dbos"] = {
            s.workflow_id: s.status
            for s in self.client.list_workflows(load_input=False, load_output=False)
        }
        return snap

    def close(self) -> None:
        self.client.destroy()
        self.db.dispose()


@pytest.fixture
def desk(database_url: str) -> Iterator[Desk]:
    opened = Desk(database_url)
    yield opened
    opened.close()


@dataclass
class Model:
    """What the example's gates should hold: each status and decider, and each used key."""

    gates: list[Approval]
    status: dict[str, str] = field(default_factory=dict)
    decided_by: dict[str, str] = field(default_factory=dict)
    # Each key's first request (ids, decision, who, edits) and what it decided.
    first: dict[str, tuple[tuple[Any, ...], DecideResult]] = field(default_factory=dict)

    def refusals(
        self, ids: list[str], step: Step, edits: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        """(approval id, phrase) of every reason `decide()` must give to refuse the call."""
        known = {gate.id: gate for gate in self.gates}
        reasons = [(aid, "is not an approval") for aid in ids if aid not in known]
        reasons += [(aid, "has an edit but is not in the batch") for aid in set(edits) - set(ids)]
        for aid in ids:
            if aid not in known:
                continue
            if self.status[aid] != "pending":
                reasons.append((aid, f"is already {self.status[aid]} by {self.decided_by[aid]}"))
            if known[aid].assignee not in (None, step.by):
                reasons.append((aid, f"is assigned to {ASSIGNEE}; {step.by} is not an admin"))
            if aid not in edits:
                continue
            if step.decision != "approved":
                reasons.append((aid, f"only an approval carries edits, not {step.decision}"))
            elif not isinstance(edits[aid], Mapping):
                reasons.append((aid, "has an edit that is not an object of fields"))
            elif "amount" in edits[aid]:
                reasons.append((aid, "has an edit naming fields RefundDraft does not have: amount"))
            elif edits[aid] != EDITS["good"]:
                reasons.append((aid, "has an edit that does not parse as RefundDraft"))
        return reasons


def assert_reasons(got: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    """Each reason given is one expected, and each expected one is given."""
    left = list(got)
    for aid, phrase in expected:
        match = next((r for r in left if r[0] == aid and phrase in r[1]), None)
        assert match is not None, f"no reason ({aid}, {phrase!r}) in {got}"
        left.remove(match)
    assert left == [], f"unexpected reasons {left}; expected {expected}"


def changes(before: dict[str, str], after: dict[str, str]) -> tuple[set[str], set[str], set[str]]:
    """The keys added, removed and changed between two snapshots of one table."""
    changed = {k for k in set(before) & set(after) if before[k] != after[k]}
    return set(after) - set(before), set(before) - set(after), changed


@settings(
    max_examples=25,
    deadline=None,
    # The database is shared by the examples on purpose: each one opens fresh gates in it.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(script=st.lists(STEPS, min_size=1, max_size=8))
def test_any_sequence_of_decide_calls_decides_each_gate_at_most_once(
    desk: Desk, script: list[Step]
) -> None:
    gates = desk.open_gates(PER_EXAMPLE)
    run_of = {gate.id: gate.run_id for gate in gates}
    model = Model(gates, status={g.id: "pending" for g in gates})
    prefix = uuid.uuid4().hex[:8]

    for previous, drawn in zip([None, *script], script, strict=False):
        step = drawn
        if drawn.again and previous is not None:
            step = replace(
                drawn, targets=previous.targets, missing=previous.missing, key=previous.key
            )
        ids = sorted({gates[i].id for i in step.targets} | ({MISSING} if step.missing else set()))
        edits = {gates[i].id: EDITS[kind] for i, kind in step.edits.items()}
        key = f"{prefix}:k{step.key}"
        before = desk.snapshot()
        request = (tuple(ids), step.decision, step.by, edits)
        outcome: DecideResult | DecisionRefused | KeyReused
        try:
            outcome = desk.approvals.decide(
                ids, step.decision, by=step.by, via="test", decision_key=key, edits=edits
            )
        except (DecisionRefused, KeyReused) as refused:
            outcome = refused
        after = desk.snapshot()

        if key in model.first:
            first_request, first = model.first[key]
            if first_request == request:
                event("replayed")
                # The same request under its key returns the first result.
                assert isinstance(outcome, DecideResult), outcome
                assert outcome.replayed
                assert (outcome.batch_id, outcome.decided) == (first.batch_id, first.decided)
            else:
                event("refused: key used for another request")
                assert isinstance(outcome, KeyReused), outcome
                assert f"decision key {key!r} was first used to" in str(outcome)
            assert after == before
            continue

        expected = model.refusals(ids, step, edits)
        if expected:
            event("refused")
            assert isinstance(outcome, DecisionRefused), (outcome, expected)
            assert_reasons(outcome.reasons, expected)
            assert after == before, "a refused call wrote something"
            continue

        # Decided whole: every gate of the batch, its run resumed, nothing else touched.
        event("decided a batch" if len(ids) > 1 else "decided one gate")
        assert isinstance(outcome, DecideResult), outcome
        assert not outcome.replayed
        assert (outcome.batch_id is None) == (len(ids) == 1)
        assert outcome.decided == [
            Decided(aid, run_of[aid], "refund", step.decision, f"{run_of[aid]}:2") for aid in ids
        ]
        assert changes(before["remit_approvals"], after["remit_approvals"]) == (
            set(),
            set(),
            set(ids),
        )
        added, removed, changed = changes(before["remit_audit"], after["remit_audit"])
        assert (removed, changed) == (set(), set())
        assert sorted(json.loads(after["remit_audit"][a])["target"] for a in added) == ids
        assert changes(before["remit_decisions"], after["remit_decisions"]) == (
            {key},
            set(),
            set(),
        )
        assert changes(before["remit_runs"], after["remit_runs"]) == (
            set(),
            set(),
            {run_of[aid] for aid in ids},
        )
        assert after["remit_resumes"] == before["remit_resumes"] == {}
        assert changes(before["dbos"], after["dbos"]) == (
            {f"{run_of[aid]}:2" for aid in ids},
            set(),
            set(),
        )
        for aid in ids:
            row = desk.approvals.get(aid)
            assert (row.status, row.decided_by, row.decision_key, row.batch_id) == (
                step.decision,
                step.by,
                key,
                outcome.batch_id,
            )
            assert row.edited_draft_json == (
                None if aid not in edits else {"sku": "sku-1", "quantity": 5, "note": "edited"}
            )
            run = desk.runs.get(run_of[aid])
            assert (run.status, run.attempt, run.workflow_id) == ("queued", 2, f"{run.run_id}:2")
            model.status[aid] = step.decision
            model.decided_by[aid] = step.by
        model.first[key] = (request, outcome)

    # Each gate changed at most once, and its audit says so.
    for gate in gates:
        assert desk.approvals.get(gate.id).status == model.status[gate.id]
        trail = desk.approvals.audit(gate.id)
        assert len(trail) == (0 if model.status[gate.id] == "pending" else 1)


def race_decide_and_cancel(desk: Desk, gate: Approval) -> DecideResult | DecisionRefused:
    """Decide `gate` and cancel its run at once; what the decision came to."""
    start = threading.Barrier(2)

    def decide() -> DecideResult | DecisionRefused:
        start.wait(timeout=30)
        try:
            return desk.approvals.decide(
                [gate.id], "approved", by="user:b", via="test", decision_key=f"d-{gate.id}"
            )
        except DecisionRefused as refused:
            return refused

    def stop() -> None:
        start.wait(timeout=30)
        cancel_run(desk.runs, desk.client, gate.run_id, by="user:ops")

    with ThreadPoolExecutor(2) as pool:
        decided, stopped = pool.submit(decide), pool.submit(stop)
        stopped.result(timeout=60)
        return decided.result(timeout=60)


def test_a_decision_racing_a_cancel_resumes_the_run_only_if_it_came_first(desk: Desk) -> None:
    for gate in desk.open_gates(6)[1:]:  # the first is assigned to someone: left out
        outcome = race_decide_and_cancel(desk, gate)
        run, row = desk.runs.get(gate.run_id), desk.approvals.get(gate.id)
        trail = [a["action"] for a in desk.approvals.audit(gate.id)]
        assert run.status == "cancelled"
        if isinstance(outcome, DecideResult):
            # The decision came first: it moved the run on once, then the cancel ended it.
            assert (row.status, row.resumed_workflow_id) == ("approved", f"{run.run_id}:2")
            assert run.attempt == 2
            assert trail == ["approval.approved"]
        else:
            # The cancel came first: it cancelled the gate with the run, and the decision was
            # refused having written nothing; the run never left attempt 1.
            assert "is already cancelled by user:ops" in str(outcome)
            assert (row.status, row.resumed_workflow_id) == ("cancelled", None)
            assert run.attempt == 1
            assert trail == ["approval.cancelled"]
        with desk.db.engine.connect() as conn:
            outbox = conn.execute(sa.select(resumes).where(resumes.c.run_id == run.run_id))
            assert list(outbox) == []
