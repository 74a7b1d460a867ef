"""The record of where an attempt's runs stopped (`Recoveries.record`) keeps every stop when
several processes record recoveries of one attempt at once: read and write are one transaction,
on SQLite too, so none is lost and none is refused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from remit.core.database import Database
from remit.ops.recoveries import Recoveries


def test_recoveries_recorded_at_once_are_all_kept(db: Database) -> None:
    store = Recoveries(db)

    def record(position: int) -> list[int]:
        return store.record("run-1", "run-1-a1", position, keep=500)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(record, range(1, 161)))

    stops = store.record("run-1", "run-1-a1", 0, keep=500)
    assert sorted(stops) == list(range(161))
