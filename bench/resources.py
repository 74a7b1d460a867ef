"""Declared resources: how long a plan over 1,000 takes, and an apply that creates 100.

    .venv/bin/python bench/bench.py --only resources [--quick | --smoke] [--write]   # `make bench` runs it too
    .venv/bin/python bench/resources.py [--quick | --smoke] [--write]

The vendor is the tests' small fake of two resource types (`tests/resource_support.py`): `store.box` holds
data (a name that cannot change, a size, a write-only password taken from a secret, a URL the
vendor sets) and `store.alias` is stateless, pointing at a box's URL by reference. Every
declared alias references a box, so half the resources wait on another's vendor-set field.

Plan: 500 boxes and 500 aliases, through `app.resources.plan` with the ops called directly on
the fake (what `remit plan` does), nothing recorded: once with every resource already created
and bound (1,000 `plan` calls that find nothing to do) and once with none (1,000 to create).
The median of a few repeats each.

Apply: the built-in `apply` workflow creating 50 boxes and 50 aliases in a `Harness` (a worker
in this process, the fake as the vendor), on a fresh SQLite file and on a fresh Postgres
database, timed from its start to its run done (the median of three, each on a fresh database);
every binding is written to the lockfile as it is made. Against it, in the same process and on
the same database, bare DBOS runs a workflow of as many steps as DBOS recorded for the apply,
each step a dictionary write.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (
    Figure,
    Size,
    deadline,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    write_section,
)
from dbos import DBOS, WorkflowHandle

from remit import App, ref, secret
from remit.connectors.base import CallContext
from remit.core.fence import attempt_workflow_id
from remit.core.runs import queue_id
from remit.declare.resources import SECRET_KEY, CreateIn, Declaration
from remit.resources.direct import direct_caller
from remit.resources.lockfile import Binding, render
from remit.testing import Harness

# The tests' vendor of two resource types, the one this measures.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.resource_support import FakeStore, alias, box, store

PASSWORD = "BOX_PASSWORD"
ENVIRON = {PASSWORD: "a-password-for-the-bench"}
BARE_WORKFLOW = "bare-resource-steps"
POLL = 0.01
APPLY_TIMEOUT = 600.0  # seconds, at most, for an apply, and for bare DBOS's workflow


def declarations(pairs: int) -> dict[str, Declaration]:
    """`pairs` boxes and as many aliases, each alias pointing at its box's URL."""
    declared: dict[str, Declaration] = {}
    for n in range(pairs):
        declared[f"box_{n:04d}"] = box(name=f"b{n:04d}", size=1, password=secret(PASSWORD))
        declared[f"alias_{n:04d}"] = alias(name=f"a{n:04d}", target=ref(f"box_{n:04d}", "url"))
    return declared


def resource_app(pairs: int, lockfile: Path) -> App:
    app = App(name="resources-bench", workflows=[], connectors=[store])
    app.use_resources(declarations=declarations(pairs), lockfile=lockfile)
    return app


def _made_already(pairs: int, fake: FakeStore, lockfile: Path) -> None:
    """Create every declared resource on `fake` as apply would have, and bind them all."""
    bindings: dict[str, Binding] = {}
    hidden = {SECRET_KEY: PASSWORD}
    for n in range(pairs):
        for name, rtype, desired in (
            (f"box_{n:04d}", box, {"name": f"b{n:04d}", "size": 1, "password": hidden}),
            (f"alias_{n:04d}", alias, {"name": f"a{n:04d}", "target": _url(n)}),
        ):
            op = rtype.ops["create"]
            call = CallContext(
                op=op,
                idempotency_key=f"seed:create:{name}",
                run_id="seed",
                attempt=1,
                actor="bench",
                environ=ENVIRON,
            )
            made = fake.invoke(op, CreateIn(desired=desired), call)
            bindings[name] = Binding(type=rtype.id, id=str(made.model_dump()["id"]))
    lockfile.write_text(render(bindings))


def _url(n: int) -> str:
    return f"https://b{n:04d}.store.test"


def plan_ms(pairs: int, *, bound: bool, repeats: int, folder: Path) -> list[float]:
    """Milliseconds of each of `repeats` plans over `2 * pairs` resources on the fake."""
    lockfile = folder / f"remit-{'bound' if bound else 'new'}.lock"
    app = resource_app(pairs, lockfile)
    assert app.resources is not None
    fake = FakeStore()
    if bound:
        _made_already(pairs, fake, lockfile)
    call = direct_caller({"store": fake}, ENVIRON, actor="bench")
    expected = "none" if bound else "create"
    took: list[float] = []
    for _ in range(repeats + 1):  # the first warms up and is not counted
        began = time.perf_counter()
        made = app.resources.plan(call)
        took.append((time.perf_counter() - began) * 1000)
        counts = made.counts()
        assert counts[expected] == 2 * pairs, f"the plan is {counts}, not all {expected}"
    return took[1:]


def _register_bare() -> None:
    items: dict[int, int] = {}

    def touch(n: int) -> int:
        items[n] = items.get(n, 0) + 1
        return items[n]

    @DBOS.workflow(name=BARE_WORKFLOW)
    def bare_steps(steps: int) -> int:
        for n in range(steps):
            DBOS.run_step({"name": f"step-{n}"}, touch, n)
        return steps


def apply_ms(kind: str, pairs: int, folder: Path) -> tuple[float, int, float]:
    """(milliseconds of one apply creating `2 * pairs` resources, the steps DBOS recorded for
    it, milliseconds of bare DBOS running a workflow of that many steps), on a fresh `kind`
    database."""
    url = fresh_database(kind, folder)
    with tempfile.TemporaryDirectory(dir=folder) as own:
        lockfile = Path(own) / "remit.lock"
        fake = FakeStore()
        harness = Harness(
            resource_app(pairs, lockfile),
            database_url=url,
            implementations={"store": fake},
            environ=ENVIRON,
            poll_interval=POLL,
        )
        harness.worker.start(before_launch=_register_bare)
        try:
            began = time.perf_counter()
            run = harness.run("apply", {}, timeout=APPLY_TIMEOUT)
            took = (time.perf_counter() - began) * 1000
            assert run.status == "done", f"the apply ended {run.status}"
            made = len(fake.records(box)) + len(fake.records(alias))
            assert made == 2 * pairs, f"the fake holds {made} resources"
            bound = lockfile.read_text().count('"id"')
            assert bound == 2 * pairs, f"{bound} bindings in the lockfile"
            client = harness.worker.client
            steps = len(client.list_workflow_steps(attempt_workflow_id(run.run_id, run.attempt)))
            print(f"(the apply on {kind} recorded {steps} DBOS steps)", flush=True)
            began = time.perf_counter()
            handle: WorkflowHandle[int] = client.enqueue(
                {"workflow_name": BARE_WORKFLOW, "queue_name": _queue(harness)}, steps
            )
            with deadline(APPLY_TIMEOUT, f"bare DBOS's workflow of {steps} steps on {kind}"):
                handle.get_result(polling_interval_sec=0.002)
            bare_took = (time.perf_counter() - began) * 1000
        finally:
            harness.__exit__(None, None, None)
            drop_database(url)
    return took, steps, bare_took


def _queue(harness: Harness) -> str:
    """The DBOS queue the apply ran on (queues are named by app), for the bare workflow to be
    enqueued on."""
    return queue_id(harness.app.name, harness.app.workflow("apply").queue)


def measure(*, size: Size, folder: Path) -> list[Figure]:
    repeats = size.pick(smoke=1, quick=3, full=5)
    # The goals are stated for these sizes; a smoke run makes 10 and creates 4.
    plan_pairs, apply_pairs = size.pick(smoke=(5, 2), quick=(500, 50), full=(500, 50))
    bound = statistics.median(plan_ms(plan_pairs, bound=True, repeats=repeats, folder=folder))
    new = statistics.median(plan_ms(plan_pairs, bound=False, repeats=repeats, folder=folder))
    print(f"BENCH plan_1000_ms {bound:.1f} ms", flush=True)
    print(f"BENCH plan_1000_create_ms {new:.1f} ms", flush=True)
    what = (
        f"median of {repeats}, {plan_pairs} boxes + {plan_pairs} aliases, ops called directly "
        "on the fake"
    )
    figures: list[Figure] = [
        ("plan_1000_ms", bound, "ms", f"all bound and up to date (goal ≤ 2000), {what}"),
        ("plan_1000_create_ms", new, "ms", f"none bound, all to create (goal ≤ 2000), {what}"),
    ]
    count = 2 * apply_pairs
    applies = size.pick(smoke=1, quick=1, full=3)
    for kind, short in (("sqlite", "sqlite"), ("postgres", "pg")):
        made = [apply_ms(kind, apply_pairs, folder) for _ in range(applies)]
        took = statistics.median(m[0] for m in made)
        bare_took = statistics.median(m[2] for m in made)
        steps = made[0][1]
        each = f"median of {applies}, each on a fresh database"
        for name, value, unit, note in (
            (
                f"apply_100_ms_{short}",
                took,
                "ms",
                f"start to done, {apply_pairs} boxes + {apply_pairs} aliases created "
                f"(goal ≤ 5000), {each}",
            ),
            (f"apply_per_resource_ms_{short}", took / count, "ms", f"the apply ÷ {count}"),
            (
                f"apply_bare_ms_{short}",
                bare_took,
                "ms",
                f"bare DBOS, one workflow of {steps} steps (as many as the apply recorded), "
                f"enqueue to result, {each}",
            ),
            (f"apply_ratio_{short}", took / bare_took, "x", "the apply ÷ bare DBOS"),
        ):
            print(f"BENCH {name} {value:.2f} {unit}", flush=True)
            figures.append((name, value, unit, note))
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres on the same machine, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "A fake vendor of two types: `store.box` (stateful, a write-only password from a secret, "
        "a URL the vendor sets) and `store.alias` (stateless, its target a reference to a box's "
        "URL). Plan: `app.resources.plan` over 500 boxes and 500 aliases with the ops called "
        "directly (as `remit plan` does), nothing recorded. Apply: the built-in `apply` in a "
        "`Harness` on a fresh database, from its start to its run done, every binding written "
        "to the lockfile as it is made; bare DBOS then runs, on the same worker, a workflow of as "
        "many steps as DBOS recorded for the apply.",
        "",
        *figure_table(figures),
    ]
    write_section("Declared resources", "\n".join(lines))


if __name__ == "__main__":
    run_alone(
        "resources.py",
        measure,
        write,
        quick_help="fewer repeats of the plan",
        smoke_help="a plan over 10 resources and an apply creating 4: only that it runs",
    )
