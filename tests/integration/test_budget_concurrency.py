"""Reserve first: four processes racing for one budget never overspend it, even when one dies.

Four processes each make 50 LLM calls at once (`tests/budget_caller.py`), each call reserving
$0.10 against a $10.00 monthly budget, twice what it allows. One process, started first so that
it holds a reservation before the budget runs out, is killed (SIGKILL) while its calls wait on
the vendor: their reservations are orphaned, and a reconciler pass
releases them and marks their calls `abandoned`. Throughout, the test reads the period's counters: committed spend, and spend
with what calls in flight reserved, never pass $10.00. After, nothing is reserved, the ledger's
costs add up to the counter, and the calls settled are the counter's worth of dimes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa

from remit.budgets.store import Budgets
from remit.core.clock import ManualClock, SystemClock
from remit.core.database import Database
from remit.core.runs import RunStore
from remit.core.schema import budget_periods, ledger, reservations
from remit.ops.reconciler import Reconciler
from tests.budget_caller import APP, LIMIT

ROOT = Path(__file__).resolve().parents[2]
CALLS = 50
DIME = Decimal("0.10")


def caller(url: str, name: str, delay: float, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as errors:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.budget_caller", url, name, str(CALLS), str(delay)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=errors,
        )


def counters(conn: sa.Connection) -> tuple[Decimal, Decimal]:
    row = conn.execute(
        sa.select(budget_periods.c.spent_usd, budget_periods.c.reserved_usd).where(
            budget_periods.c.app == APP
        )
    ).one_or_none()
    return (Decimal(0), Decimal(0)) if row is None else (row.spent_usd, row.reserved_usd)


def victims_calls(conn: sa.Connection) -> tuple[int, int]:
    """How many of the victim's calls reserved, and how many were refused."""
    held = conn.execute(
        sa.select(sa.func.count())
        .select_from(reservations)
        .where(reservations.c.run_id.like("call_victim_%"))
    ).scalar_one()
    refused = conn.execute(
        sa.select(sa.func.count())
        .select_from(ledger)
        .where(ledger.c.run_id.like("call_victim_%"), ledger.c.status == "failed")
    ).scalar_one()
    return held, refused


def test_racing_processes_never_overspend_and_orphans_are_released(
    database_url: str, tmp_path: Path
) -> None:
    db = Database(database_url)
    db.prepare()
    try:
        # The victim's vendor never answers before it dies; the others' answer in 0.2 s. The
        # others start once the victim holds a reservation: started together, they could spend
        # the whole budget before it reserved any, and it would die holding nothing.
        deadline = time.monotonic() + 120
        victim = caller(database_url, "victim", 120.0, tmp_path / "victim.log")
        with db.engine.connect() as conn:
            while victims_calls(conn)[0] == 0:
                conn.rollback()
                assert victim.poll() is None, (tmp_path / "victim.log").read_text()[-1500:]
                assert time.monotonic() < deadline, "the victim reserved nothing in 2 minutes"
                time.sleep(0.01)
        others = [caller(database_url, f"p{n}", 0.2, tmp_path / f"p{n}.log") for n in range(3)]
        most_spent = most_committed = Decimal(0)
        killed = False
        with db.engine.connect() as conn:
            while any(proc.poll() is None for proc in others) or not killed:
                assert time.monotonic() < deadline, (
                    "the callers did not finish in 2 minutes; their errors:\n"
                    + "\n".join(
                        f"{log.name}: {log.read_text()[-1500:]}"
                        for log in sorted(tmp_path.glob("*.log"))
                    )
                )
                spent, reserved = counters(conn)
                conn.rollback()  # a fresh snapshot each read
                assert spent <= LIMIT.limit_usd, f"spent {spent} passed the limit"
                assert spent + reserved <= LIMIT.limit_usd, f"{spent} + {reserved} passed it"
                most_spent = max(most_spent, spent)
                most_committed = max(most_committed, spent + reserved)
                if not killed:
                    held, refused = victims_calls(conn)
                    conn.rollback()
                    # Killed once each of its calls has reserved or been refused, or, on a
                    # machine so loaded that some of them have not by the time the others are
                    # done, then: it dies holding reservations either way.
                    settled = held + refused == CALLS
                    if held and (settled or all(proc.poll() is not None for proc in others)):
                        victim.send_signal(signal.SIGKILL)
                        victim.wait()
                        killed = True
                time.sleep(0.01)
        printed = [proc.communicate()[0].decode().split() for proc in others]
        assert all(proc.returncode == 0 for proc in others), printed
        assert all(words[-1] == "0" for words in printed), printed  # no call failed otherwise
        answered = sum(int(words[1]) for words in printed)

        with db.engine.connect() as conn:
            orphans = conn.execute(
                sa.select(sa.func.count())
                .select_from(reservations)
                .where(reservations.c.status == "reserved")
            ).scalar_one()
        assert orphans > 0, "the victim died holding no reservation: the test proved nothing"
        with db.engine.connect() as conn:
            cut_off = conn.execute(
                sa.select(sa.func.count()).select_from(ledger).where(ledger.c.status == "started")
            ).scalar_one()
        # Each reservation belongs to a call whose row was written before it was reserved.
        assert cut_off >= orphans

        # A pass two hours on: the dead process's direct calls are past their lease.
        later = ManualClock(SystemClock().now() + timedelta(hours=2))
        client = db.client(APP)
        try:
            report = Reconciler(
                RunStore(db, clock=later),
                client,
                version="v",
                live_versions=lambda: {"v"},
                budgets=Budgets(db, APP, [LIMIT], clock=later),
            ).run_pass()
        finally:
            client.destroy()
        assert report.errors == []
        kinds = [a.kind for a in report.actions]
        # The dead process's calls are abandoned, and what they reserved is released.
        assert (kinds.count("abandoned"), kinds.count("release")) == (cut_off, orphans)
        assert len(kinds) == cut_off + orphans
        with db.engine.connect() as conn:
            left = conn.execute(
                sa.select(sa.func.count()).select_from(ledger).where(ledger.c.status == "started")
            ).scalar_one()
        assert left == 0

        with db.engine.connect() as conn:
            spent, reserved = counters(conn)
            ledger_total, ledger_calls = conn.execute(
                sa.select(sa.func.sum(ledger.c.cost), sa.func.count()).where(
                    ledger.c.op_id == "llm.chat.complete", ledger.c.status == "ok"
                )
            ).one()
            settled = conn.execute(
                sa.select(sa.func.count())
                .select_from(reservations)
                .where(reservations.c.status == "settled")
            ).scalar_one()
        assert reserved == 0
        assert spent <= LIMIT.limit_usd
        assert Decimal(ledger_total) == spent
        assert ledger_calls == settled == answered == spent / DIME
        assert most_committed <= LIMIT.limit_usd
        assert most_spent == spent
        store = Budgets(db, APP, [LIMIT])
        assert [d.drift_usd for d in store.drift(store.periods())] == [0]
    finally:
        for proc in [victim, *others]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        db.dispose()
