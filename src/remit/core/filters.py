"""The filters of a list of runs as a person types them: the record the runs concern as
`type:id` (`invoice:inv_1003`), and the earliest start as a date, a time or how long ago
(`2026-12-01`, `2026-12-01T09:30+02:00`, `2h`, `3d`). Pure: `now` is given."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from remit.core.activity import Record, check_record
from remit.core.errors import RemitError
from remit.core.text import excerpt

# How long ago: a whole number and a unit, minutes, hours, days or weeks.
_AGO = re.compile(r"([1-9][0-9]{0,5})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

SINCE_FORMS = (
    "an ISO date or time (2026-12-01, 2026-12-01T09:30, 2026-12-01T09:30+02:00; UTC unless it "
    "names a zone) or how long ago (30m, 2h, 3d, 1w)"
)


def record_filter(text: str, *, where: str = "--record") -> Record:
    """`type:id` as a record, split at its first colon (an id may hold more); `RemitError`
    saying the form, or `InputInvalid` naming the part no record could have."""
    kind, colon, ident = text.partition(":")
    if not colon:
        raise RemitError(
            f"{where} {excerpt(text)!r} is not TYPE:ID: name the record as its type and id, "
            "e.g. invoice:inv_1003"
        )
    return check_record((kind, ident), where=where)


def since_filter(text: str, *, now: datetime, where: str = "--since") -> datetime:
    """The moment `text` names, in UTC: an ISO date (its midnight, UTC), an ISO time (UTC
    unless it names a zone), or a span back from `now` (`2h`). `RemitError` saying the forms
    it takes otherwise."""
    given = text.strip()
    ago = _AGO.fullmatch(given)
    try:
        if ago is not None:
            return now - timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
        moment = datetime.fromisoformat(given)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except ValueError:
        raise RemitError(f"{where} {excerpt(text)!r} is not a time: give {SINCE_FORMS}") from None
    except OverflowError:
        raise RemitError(
            f"{where} {excerpt(text)!r} is outside the years 1 to 9999: give a time within them"
        ) from None
