"""What a budget costs a call with a cost, on Postgres.

    .venv/bin/python bench/budgets.py [--quick | --smoke] [--write]    # `make bench` runs it too

A call of an op with a cost (an LLM call) makes two transactions a call without one does not
make in the same way: before it, the reservation (lock the period row, check the limit, add to
`reserved`, write the reservation row); after it, the settlement, which writes the call's
ledger row in the same transaction as it moves the amount from `reserved` to `spent`. Each is
timed here as `OpCaller` makes it (`Budgets.reserve`, then `Budgets.settle` with the ledger row
written by `LedgerStore.finish_in`), against one app budget, on one fresh database, no worker
running. The first calls warm up and are not counted.

`budget_reserve_ms` is the median of reserve plus settle, one call at a time. Beside it: the
ledger row alone (`LedgerStore.finish` of a read, what a call with no cost writes instead of
the settlement), and reserve plus settle from 8 threads at once, every call locking the same
period row.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from approvals import database  # bench/approvals.py, beside this file
from common import Size, figure_table, run_alone, write_section

from remit.budgets.model import Budget
from remit.budgets.store import Budgets
from remit.core.database import Database
from remit.core.ledger import CallRecord, LedgerStore, input_hash
from remit.core.outcome import Ok

APP = "bench"
WARMUP = 100
THREADS = 8
CONTENDED_TIMEOUT = 300.0  # seconds, at most, for the threads' calls
COST = Decimal("0.0042")
OUTPUT = {"content": "Dear customer, please pay.", "model": "gpt-4o-mini", "output_tokens": 7}

Figure = tuple[str, float, str, str]


def record(key: str) -> CallRecord:
    return CallRecord(
        run_id=key.split(":")[0],
        attempt=1,
        step_id=3,
        op_id="llm.chat.complete",
        effect="read",
        idempotent=False,
        idempotency_key=key,
        input_hash=input_hash({"key": key}),
        actor="bench",
    )


def billed_call(store: Budgets, ledger: LedgerStore, key: str) -> tuple[float, float]:
    """One call's reservation and settlement, as `OpCaller` makes them: seconds each."""
    began = time.perf_counter()
    reservation = store.reserve(
        op_id="llm.chat.complete",
        key=key,
        run_id=key.split(":")[0],
        workflow_id=key.split(":")[0] + ":1",
        workflow="ar.chase-invoice",
        max_cost=Decimal("0.0100"),
    )
    reserved = time.perf_counter()
    assert reservation is not None

    def write(conn: Any) -> bool:
        return ledger.finish_in(conn, record(key), Ok(output=OUTPUT), tries=1, cost=COST)

    assert store.settle(reservation, COST, record=write)
    return reserved - began, time.perf_counter() - reserved


def measure(*, size: Size, folder: Path) -> list[Figure]:
    calls = size.pick(smoke=2 * THREADS, quick=300, full=1000)
    warmup = size.pick(smoke=2, quick=WARMUP, full=WARMUP)
    with database(folder) as (db, _url):
        store = Budgets(db, APP, [Budget(1_000_000)])
        ledger = LedgerStore(db)
        reserves: list[float] = []
        settles: list[float] = []
        for i in range(warmup + calls):
            took = billed_call(store, ledger, f"run_seq{i}:3")
            if i >= warmup:
                reserves.append(took[0])
                settles.append(took[1])
        plain: list[float] = []
        for i in range(warmup + calls):
            began = time.perf_counter()
            ledger.finish(record(f"run_plain{i}:3"), Ok(output=OUTPUT), tries=1)
            if i >= warmup:
                plain.append(time.perf_counter() - began)
        contended, wall = contended_calls(db, store, calls)
        [period] = store.periods()
        assert period.reserved_usd == 0
        assert period.spent_usd == COST * (warmup + calls + THREADS * (calls // THREADS))
    totals = [r + s for r, s in zip(reserves, settles, strict=True)]
    figures: list[Figure] = [
        (
            "budget_reserve_ms",
            statistics.median(totals) * 1000,
            "ms",
            f"median of {calls} reserves plus settles (the ledger row in the settle), one at a time",
        ),
        ("budget_reserve_only_ms", statistics.median(reserves) * 1000, "ms", "the reserve alone"),
        (
            "budget_settle_only_ms",
            statistics.median(settles) * 1000,
            "ms",
            "the settle alone, its ledger row included",
        ),
        (
            "ledger_finish_ms",
            statistics.median(plain) * 1000,
            "ms",
            "a read's ledger row alone: what a call with no cost writes instead of the settle",
        ),
        (
            "budget_reserve_8_threads_ms",
            statistics.median(contended) * 1000,
            "ms",
            f"median reserve plus settle with {THREADS} threads at once on one period row",
        ),
        (
            "budget_calls_per_s_8_threads",
            len(contended) / wall,
            "calls/s",
            f"reserves plus settles a second on one period row, {THREADS} threads at once",
        ),
    ]
    for name, value, unit, note in figures:
        print(f"BENCH {name} {value:.2f} {unit}  # {note}")
    return figures


def contended_calls(db: Database, store: Budgets, calls: int) -> tuple[list[float], float]:
    """Reserve plus settle from `THREADS` threads at once, each on its own connection: the
    seconds of each, and of them all."""
    ledger = LedgerStore(db)
    each = calls // THREADS
    times: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS, timeout=CONTENDED_TIMEOUT)

    def run(n: int) -> None:
        start.wait()
        for i in range(each):
            took = sum(billed_call(store, ledger, f"run_t{n}x{i}:3"))
            with lock:
                times.append(took)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(THREADS)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    until = time.monotonic() + CONTENDED_TIMEOUT
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()))
    took = time.perf_counter() - began
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(
            f"waited {CONTENDED_TIMEOUT:g} s for {THREADS} threads to make {each} reserves and "
            f"settles each; {len(times)} of {THREADS * each} made"
        )
    assert len(times) == THREADS * each, f"{len(times)} of {THREADS * each} calls made: see above"
    return times, took


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres, {time.strftime('%Y-%m-%d')}. One app "
        "budget; each call is reserved (`Budgets.reserve`: the period row locked, the limit "
        "checked, `reserved` raised, the reservation written) and settled (`Budgets.settle`: "
        "the call's ledger row written by `LedgerStore.finish_in` in the same transaction, "
        "`reserved` lowered and `spent` raised, the reservation settled), as `OpCaller` makes "
        f"them, on one fresh database, no worker running; the first {WARMUP} calls are not "
        "counted.",
        "",
        *figure_table(figures),
        "",
        "A call with a cost makes one more transaction than a call without one (the reserve), "
        "and its ledger row's transaction does more (the settle); `budget_reserve_ms` less "
        "`ledger_finish_ms` is what a budget adds to a call. Calls on one budget serialize on "
        "its period row for the length of a reserve or a settle (its commit included), not of "
        "the call to the vendor: `budget_calls_per_s_8_threads` is about the most calls a "
        "second one budget takes on this database, far more than an LLM vendor's rate limits "
        "let an app make.",
    ]
    write_section("Budgets: what reserving and settling cost a call", "\n".join(lines))


def main() -> None:
    run_alone(
        "budgets.py",
        measure,
        write,
        quick_help="fewer calls",
        smoke_help="16 calls of each kind: only that it runs",
    )


if __name__ == "__main__":
    main()
