"""What a policy check costs a start, on Postgres.

    .venv/bin/python bench/policy.py [--quick | --smoke] [--write]    # `make bench` runs it too

The example repo (`examples/acme`, its `policies/acme.cedar` and `principals.toml`) starts
`ar.chase-invoice` runs, as `remit start` does: once through `Guard.start` (the input parsed, the
policies asked whether user:ann may start it, then the run's row written and its first attempt
enqueued), and once through `RunStore.start` alone, with no check. The two kinds alternate,
start by start, on one database, so drift in the server's speed falls on both alike; no worker
runs, so the runs stay queued. The first starts of each kind warm up and are not counted.

`policy_check_us` is the difference of the two medians: what a check adds to a start. Alone,
a check is also timed in a loop (`Guard.check` of an allowed start, and of a refused one, which
writes its denial row): `policy_check_alone_us` and `policy_denial_us`.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

from approvals import database  # bench/approvals.py, beside this file
from common import ROOT, Size, figure_table, run_alone, write_section

from remit.app import load_app
from remit.core.runs import RunStore
from remit.policy.guard import Guard

APP = ROOT / "examples" / "acme"
WORKFLOW = "ar.chase-invoice"
INPUT = {"invoice_id": "inv_1001", "customer_email": "ap@northwind.example"}
CLERK = "user:ann"
WARMUP = 50

Figure = tuple[str, float, str, str]


def measure(*, size: Size, folder: Path) -> list[Figure]:
    starts = size.pick(smoke=5, quick=300, full=2000)
    checks = size.pick(smoke=20, quick=2000, full=20000)
    warmup = size.pick(smoke=2, quick=WARMUP, full=WARMUP)
    app = load_app(APP)
    logging.getLogger("remit.guard").setLevel(logging.ERROR)  # a denial per loop is the point
    with database(folder) as (db, _url):
        client = db.client(app.name)
        store = RunStore(db, app=app.name)
        guard = Guard.of(app, db)
        wf = app.workflow(WORKFLOW)
        checked: list[float] = []
        bare: list[float] = []
        try:
            for i in range(warmup + starts):
                pair = (("checked", checked), ("bare", bare))
                # Each kind goes first in every other pair: neither gains from following.
                for kind, times in pair if i % 2 else pair[::-1]:
                    began = time.perf_counter()
                    if kind == "checked":
                        guard.start(store, client, wf, INPUT, by=CLERK)
                    else:
                        store.start(client, wf, INPUT, started_by=CLERK)
                    if i >= warmup:
                        times.append(time.perf_counter() - began)
        finally:
            client.destroy()
        context = {"input": INPUT}
        began = time.perf_counter()
        for _ in range(checks):
            assert guard.check(CLERK, "start", WORKFLOW, context).allowed
        alone = (time.perf_counter() - began) / checks
        denials = max(checks // 20, size.pick(smoke=5, quick=100, full=100))
        began = time.perf_counter()
        for _ in range(denials):
            assert not guard.check("user:dave", "start", WORKFLOW, context).allowed
        denial = (time.perf_counter() - began) / denials
    with_check, without = statistics.median(checked), statistics.median(bare)
    figures: list[Figure] = [
        ("start_checked_ms", with_check * 1000, "ms", f"median of {starts} starts with a check"),
        ("start_unchecked_ms", without * 1000, "ms", f"median of {starts} starts without one"),
        (
            "policy_check_us",
            (with_check - without) * 1e6,
            "µs",
            "what the check adds to a start: the difference of the medians (goal ≤ 300)",
        ),
        ("policy_check_alone_us", alone * 1e6, "µs", f"one allowed check, alone, {checks} times"),
        ("policy_denial_us", denial * 1e6, "µs", "one refused check, its denial row written"),
    ]
    for name, value, unit, note in figures:
        print(f"BENCH {name} {value:.2f} {unit}  # {note}")
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres, {time.strftime('%Y-%m-%d')}. The "
        "example desk's policies (`examples/acme/policies/`); starts of `ar.chase-invoice` as "
        "user:ann through `Guard.start` (input parsed, policies asked, run written and enqueued) "
        "alternate with starts through `RunStore.start` alone, on one database, no worker "
        f"running; the first {WARMUP} of each are not counted. A check alone is `Guard.check` "
        "in a loop: Cedar (`cedarpy`, the policies parsed once when the app loads) and the "
        "context built from the input by the schema.",
        "",
        *figure_table(figures),
        "",
        "The difference of the medians is larger than a check alone: the check's own code "
        "(the Cedar call, about 30 µs, and the input's context, about 1 µs) accounts for part "
        "of it, and the rest moves with the load on this 2-core machine (quick runs gave 110 "
        "to 240 µs while tests ran beside them).",
    ]
    write_section("Policies: what a check costs a start", "\n".join(lines))


def main() -> None:
    run_alone(
        "policy.py",
        measure,
        write,
        quick_help="fewer starts and checks",
        smoke_help="5 starts of each kind and 20 checks: only that it runs",
    )


if __name__ == "__main__":
    main()
