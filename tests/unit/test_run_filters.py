"""The filters of a list of runs as a person types them (`remit runs --record --since`, `GET
/runs?record=&since=`): what each form means, and what a form no one could mean is told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remit.core.errors import InputInvalid, RemitError
from remit.core.filters import record_filter, since_filter

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("2h", NOW - timedelta(hours=2)),
        ("30m", NOW - timedelta(minutes=30)),
        ("3d", NOW - timedelta(days=3)),
        ("1w", NOW - timedelta(weeks=1)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01T09:30", datetime(2026, 12, 1, 9, 30, tzinfo=UTC)),
        ("2026-12-01T09:30:00Z", datetime(2026, 12, 1, 9, 30, tzinfo=UTC)),
        ("2026-12-01T09:30+02:00", datetime(2026, 12, 1, 7, 30, tzinfo=UTC)),
        (" 2h ", NOW - timedelta(hours=2)),
    ],
)
def test_since_reads_a_date_a_time_or_how_long_ago(given: str, meant: datetime) -> None:
    found = since_filter(given, now=NOW)
    assert found == meant
    assert found.tzinfo == UTC


@pytest.mark.parametrize("given", ["yesterday", "0h", "2 hours", "-2h", "2y", "", "12/01/2026"])
def test_since_says_which_forms_it_takes(given: str) -> None:
    with pytest.raises(RemitError) as refused:
        since_filter(given, now=NOW)
    assert str(refused.value) == (
        f"--since {given!r} is not a time: give an ISO date or time (2026-12-01, "
        "2026-12-01T09:30, 2026-12-01T09:30+02:00; UTC unless it names a zone) or how long "
        "ago (30m, 2h, 3d, 1w)"
    )


@pytest.mark.parametrize("given", ["999999w", "0001-01-01T00:00+14:00"])
def test_since_beyond_the_calendar_is_refused(given: str) -> None:
    with pytest.raises(RemitError, match="is outside the years 1 to 9999"):
        since_filter(given, now=NOW, where="since")


def test_a_record_is_type_colon_id() -> None:
    assert record_filter("invoice:inv_1003") == ("invoice", "inv_1003")
    assert record_filter("order:eu:77") == ("order", "eu:77")  # an id may hold a colon
    with pytest.raises(RemitError, match=r"'inv_1003' is not TYPE:ID: name the record as its"):
        record_filter("inv_1003")
    with pytest.raises(InputInvalid, match="its id is empty"):
        record_filter("invoice:")
    with pytest.raises(InputInvalid, match="its type holds control characters"):
        record_filter("in\x1bvoice:inv_1")
