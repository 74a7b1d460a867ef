"""`remit activity TYPE ID`: everything that happened about one of the business's records.

Runs, gates and tasks that name a record (`("invoice", "inv_1003")`) write what happened to
it: runs started, retried and ended, gates opened and decided, writes whose outcome became
unknown and their tasks answered, the record archived. This prints a record's rows, oldest
first.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import Annotated

import typer

from remit.cli.base import (
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    moment,
    out,
    print_json,
    styled,
    whole_ids,
)

_COLOURS = {
    "approved": "green",
    "done": "green",
    "rejected": "red",
    "failed": "red",
    "expired": "yellow",
    "cancelled": "yellow",
    "not_done": "yellow",
    "opened": "cyan",
    "started": "cyan",
    "retried": "cyan",
    "archived": "magenta",
}


@cli.command("activity")
def activity(
    record_type: Annotated[str, typer.Argument(help="The record's type, e.g. invoice.")],
    record_id: Annotated[str, typer.Argument(help="The record's id, e.g. inv_1003.")],
    limit: Annotated[int, typer.Option(min=1, help="How many, oldest first.")] = 100,
    # At most the last row number (`people.activity.LAST_ROW`), read here without its imports.
    after: Annotated[
        int | None,
        typer.Option("--after", min=0, max=2**31 - 1, help="Only the rows after this row number."),
    ] = None,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """What happened about a record, oldest first: runs, gates and tasks that concern it."""
    with client_of(app_dir) as remit:
        found = remit.records.activity(record_type, record_id, limit=limit, after=after)
    if as_json:
        from remit.serve.models import ActivityView

        print_json([ActivityView.model_validate(each.as_json()) for each in found])
        return
    if not found:
        out.print(f"no activity for {record_type} {record_id}")
        return
    table = PlainTable("#", "time", "kind", "actor", "run", "what", box=None)
    for each in found:
        colour = _COLOURS.get(each.kind.rsplit(".", 1)[-1])
        table.add_row(
            str(each.id),
            moment(each.at),
            styled(each.kind, colour),
            each.actor,
            each.run_id or "-",
            each.summary,
        )
    out.print(whole_ids(table, 4))
