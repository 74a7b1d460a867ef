"""The run a route's path names, by its id or a prefix only it begins with: 404 for none, 400
for a prefix several begin with, and 403 (recorded) for one the caller may not read."""

from __future__ import annotations

from remit.client import Client
from remit.core.errors import RunNotFound
from remit.core.runs import Run
from remit.reads import Reader
from remit.serve.errors import ErrorReason, Problem


def readable_run(client: Client, who: str, given: str) -> Run:
    """The run `given` names (as `find_run` finds it), if `who` may read it: 403 otherwise."""
    reader = Reader(client, who)
    return reader.run(find_run(client, given, reader).run_id)


def find_run(client: Client, given: str, reader: Reader | None = None) -> Run:
    """The run `given` names, in full or by a prefix only it begins with (of those `reader`
    may read, if given); 404 for none, 400 for a prefix several begin with."""
    find = client.find_id if reader is None else reader.find_id
    try:
        return client.runs.get(find("run", given))
    except RunNotFound:
        message = f"no run `{given}`: GET /runs lists the runs"
        raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
