"""Lists keep their ids whole on a narrow terminal, so an id can be copied and typed back."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from remit.cli.base import whole_ids

APPROVAL, RUN = "apr_0123456789abcdef", "run_0123456789abcdef"


def _printed(table: Table) -> str:
    console = Console(width=60, file=io.StringIO())
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def _approvals() -> Table:
    table = Table("approval", "run", "type", "title", "status", "created", "expires", box=None)
    title = "Write off 612.50 EUR on inv_1003 (finance@fabrikam.example)"
    table.add_row(APPROVAL, RUN, "write-off", title, "pending", "2026-11-30", "2026-12-07")
    return table


def test_a_narrow_terminal_cuts_ids_unless_they_are_kept_whole() -> None:
    assert APPROVAL not in _printed(_approvals())
    kept = _printed(whole_ids(_approvals(), 0, 1))
    assert APPROVAL in kept
    assert RUN in kept
