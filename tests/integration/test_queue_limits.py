"""Queue limits hold across worker processes: 3 workers, global 4, per worker 2, 300 runs."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from remit.app import load_app
from remit.core.runs import RunStore
from tests.processes import Workers

# Half a minute or more of worker processes: `make check` leaves these to `make test`.
pytestmark = pytest.mark.slow

QUEUE_APP = Path(__file__).parent.parent / "apps" / "queue_app"


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans open at one instant."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now = most = 0
    for _, change in events:  # an end at the same instant as a start sorts first
        open_now += change
        most = max(most, open_now)
    return most


def test_most_at_once() -> None:
    assert most_at_once([(0, 2), (1, 3), (2, 4)]) == 2
    assert most_at_once([(0, 5), (1, 2), (3, 4)]) == 2


def test_limits_hold_across_three_workers(database_url: str, tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    workers = Workers(
        database_url, tmp_path, app=QUEUE_APP, SPANS_FILE=str(spans_file), SPAN_SECONDS="0.02"
    )
    try:
        app = load_app(QUEUE_APP)
        runs = RunStore(workers.db, app=app.name)
        client = workers.db.client(app.name)
        try:
            started = [
                runs.start(client, app.workflow("span"), {"n": n}, started_by="test").run_id
                for n in range(300)
            ]
        finally:
            client.destroy()
        procs = [workers.start(f"q{i}") for i in range(3)]
        deadline = time.monotonic() + 240
        while len(runs.list(status="done", limit=1000)) < 300:
            assert all(p.poll() is None for p in procs), workers.logs()
            assert time.monotonic() < deadline, (
                f"{len(runs.list(status='done', limit=1000))} of 300 done"
            )
            time.sleep(0.2)
    finally:
        workers.close()

    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert Counter(span["run"] for span in spans) == Counter(started)  # every run once
    assert most_at_once([(s["start"], s["end"]) for s in spans]) <= 4
    by_worker: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for span in spans:
        by_worker[span["pid"]].append((span["start"], span["end"]))
    assert len(by_worker) == 3  # the work was shared
    assert max(most_at_once(each) for each in by_worker.values()) <= 2
    assert most_at_once([(s["start"], s["end"]) for s in spans]) >= 3  # the limit, not a lull
