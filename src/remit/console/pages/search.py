"""Finding a run from the box in every page's header (`/console/search?q=...`): by its id or the
start of it (`run_3f2a`), by the record it concerns (`invoice inv_1003` or `invoice:inv_1003`),
by who started it (`user:ann`, or just `ann`), from a time on (`since:2026-12-01`,
`since:3d`), or by several of these at once (`invoice:inv_1003 user:ann`).

A word alone is read both ways: as the start of a run id and as a user's name. One run found
opens its page; several are listed as the runs page lists them, newest first; none says so and
what to try. Only the runs the signed-in person may read are looked at (`remit.reads`)."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.client import Client
from remit.console.pages.runs import PAGE_SIZE
from remit.console.render import Page, query
from remit.console.session import Viewer
from remit.core.activity import check_record
from remit.core.errors import RemitError
from remit.core.filters import record_filter, since_filter
from remit.core.runs import Run
from remit.core.text import excerpt, printable, unsafe
from remit.reads import Reader

# What a search box may be asked for, shown when it asks for nothing or finds nothing.
TRY = (
    "a run's id or the start of it (run_3f2a), a record as invoice:inv_1003 or "
    "invoice inv_1003, who started it as user:ann or ann, and since:2026-12-01 or since:3d"
)
PRINCIPALS = ("user:", "agent:")
LONGEST = 200


@dataclass(frozen=True)
class Wanted:
    """What a search asks for, as filters of `client.runs.list`. `word` is a word given alone,
    looked for both as the start of a run id and as a user's name."""

    record: tuple[str, str] | None = None
    started_by: str | None = None
    since: datetime | None = None
    word: str | None = None

    def lookups(self) -> list[dict[str, Any]]:
        """The filters of each list to read: one, or two for a word alone."""
        base = {"record": self.record, "started_by": self.started_by, "since": self.since}
        if self.word is None:
            return [base]
        by_id = {**base, "id_prefix": self.word}
        if self.word.startswith("run_") or self.started_by is not None:
            return [by_id]
        return [by_id, {**base, "started_by": f"user:{self.word}"}]

    def runs_filters(self) -> dict[str, str] | None:
        """The runs page's filters that list what this search finds, when they can."""
        if self.word is not None or self.since is not None:
            return None
        return {
            "record": "" if self.record is None else ":".join(self.record),
            "started_by": self.started_by or "",
        }


def read_search(text: str, *, now: datetime) -> Wanted:
    """What the search `text` asks for (`since:2h` counted back from `now`). Raises
    `RemitError` saying what to write instead."""
    if len(text) > LONGEST or unsafe(text):
        raise RemitError(
            f"the search {excerpt(printable(text), 60)!r} is not something a run is found by: "
            f"type at most {LONGEST} characters, with no control characters"
        )
    wanted = Wanted()
    words: list[str] = []
    for term in text.split():
        name, colon, value = term.partition(":")
        if term.startswith(PRINCIPALS):
            _once(wanted.started_by, "who started it", term)
            wanted = replace(wanted, started_by=term)
        elif colon and name == "since":
            _once(wanted.since, "since", term)
            wanted = replace(wanted, since=since_filter(value, now=now, where="since:"))
        elif colon and name and value:
            _once(wanted.record, "a record", term)
            wanted = replace(wanted, record=record_filter(term, where="the search"))
        else:
            words.append(term)
    if len(words) == 2 and wanted.record is None:
        return replace(wanted, record=check_record(tuple(words), where="the search"))
    if len(words) > 1:
        raise RemitError(
            f"{' '.join(words)!r} is more than one thing to look for: search for {TRY}"
        )
    return replace(wanted, word=words[0] if words else None)


def _once(given: object, what: str, term: str) -> None:
    if given is not None:
        raise RemitError(f"{term!r} gives {what} a second time: search for one at a time")


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/search")
    def search_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        text = (request.query_params.get("q") or "").strip()

        def show(status: int = 200, **shown: Any) -> Response:
            context = {"found": [], "more": False, "problem": None, "filters": None, **shown}
            return page.render(
                request, "search.html", viewer, status=status, title="Find a run", q=text, **context
            )

        if not text:
            return show()
        try:
            wanted = read_search(text, now=client.clock.now())
            found = _found(Reader(client, viewer.principal), wanted)
        except RemitError as bad:
            return show(422, problem=str(bad))
        if len(found) == 1:
            return page.redirect(f"/console/runs/{found[0].run_id}")
        filters = wanted.runs_filters()
        return show(
            found=found[:PAGE_SIZE],
            more=len(found) > PAGE_SIZE,
            filters=None if filters is None else query(filters),
        )


def _found(reader: Reader, wanted: Wanted) -> list[Run]:
    """The runs `wanted` finds that the reader may read, newest first, one more than a page
    (to tell there are more)."""
    seen: dict[str, Run] = {}
    for filters in wanted.lookups():
        for run in reader.runs(**filters, limit=PAGE_SIZE + 1):
            seen.setdefault(run.run_id, run)
    newest = sorted(seen.values(), key=lambda run: (run.created_at, run.run_id), reverse=True)
    return newest[: PAGE_SIZE + 1]
