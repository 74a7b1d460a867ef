"""Lists keep their ids whole on a narrow terminal, so an id can be copied and typed back."""

from __future__ import annotations

import io
import random
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from remit.cli.base import PlainTable, styled, whole_ids

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


# `PlainTable` lays out a listing itself (see `PlainTable._side_by_side`): whatever it is given,
# it must come out segment for segment as Rich's own `Table` renders it, styles included, on a
# terminal or not, and however narrow.
CELLS = [
    RUN,
    "ar.chase-invoice",
    "user:ann",
    "2026-12-05 09:00:16",
    "-",
    "",
    "a b  c",
    " lead",
    "trail ",
    "x" * 45,
    "[bold]not markup[/]",
    ":smile:",
    "naïve",
    "日本語",
    "e\u0301",
    "tab\there",
]
HEADERS = ["run", "status", "#", "set at (UTC)", "", "[b]h[/b]", "a:b", "ünï"]
STYLES = [None, "", "green", "bold magenta", "none"]


def _random_table(rng: random.Random) -> PlainTable:
    columns = rng.randint(1, 6)
    settings: dict[str, Any] = {"box": None} if rng.random() < 0.9 else {}
    if rng.random() < 0.05:
        settings["show_header"] = False
    if rng.random() < 0.05:
        settings["header_style"] = rng.choice(["", "red"])
    table = PlainTable(*(rng.choice(HEADERS[:5] * 6 + HEADERS) for _ in range(columns)), **settings)
    for _ in range(rng.randint(0, 8)):
        cells: list[str | Text | None] = []
        for _ in range(rng.randint(max(1, columns - 1), columns)):
            text = rng.choice(CELLS[:10] * 4 + CELLS)
            pick = rng.random()
            if pick < 0.2:
                cells.append(styled(text, rng.choice(STYLES)))
            elif pick < 0.25:
                cells.append(None)
            elif pick < 0.28:
                cells.append(Text(text, style="bold", justify="right"))
            else:
                cells.append(text)
        table.add_row(*cells)
    if rng.random() < 0.5 and table.rows:
        whole_ids(table, 0)
    return table


@pytest.mark.parametrize("seed", range(3))
def test_a_plain_table_renders_as_rich_renders_it(seed: int) -> None:
    rng = random.Random(seed)
    laid_out = 0
    for _ in range(80):
        table = _random_table(rng)
        console = Console(
            width=rng.choice([20, 40, 80, 150]),
            file=io.StringIO(),
            force_terminal=rng.random() < 0.5,
            color_system="truecolor",
            highlight=False,
        )
        expected = list(Table.__rich_console__(table, console, console.options))
        assert list(console.render(table)) == expected
        laid_out += table._side_by_side(console, console.options.max_width) is not None
    assert laid_out > 10  # the cases it lays out itself were among them


def test_a_listing_of_runs_is_laid_out_without_rich_measuring_each_cell() -> None:
    table = PlainTable("run", "workflow", "status", "created", "finished", box=None)
    for _ in range(50):
        table.add_row(RUN, "ar.chase-invoice", styled("queued", "yellow"), "2026-12-05", None)
    console = Console(width=150, file=io.StringIO())
    assert table._side_by_side(console, 150) is not None
    assert list(console.render(whole_ids(table, 0))) == list(
        Table.__rich_console__(table, console, console.options)
    )


def test_a_runs_ledger_keeps_its_keys_whole_on_a_narrow_terminal() -> None:
    from datetime import UTC, datetime
    from decimal import Decimal

    from remit.cli.runs import _ledger_table
    from remit.core.ledger import LedgerRow

    now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    rows = [
        LedgerRow(
            id=step,
            run_id=RUN,
            attempt=1,
            step_id=step,
            op_id=op,
            effect="write",
            idempotent=True,
            idempotency_key=f"{RUN}:{step}",
            input_hash="",
            status="ok",
            tries=1,
            actor="user:ann",
            started_at=now,
            finished_at=now,
            output=None,
            error=None,
            error_info=None,
            cost=Decimal("0.000034"),
        )
        for step, op in [(4, "mail.messages.send"), (5, "payments.invoices.record_reminder")]
    ]
    console = Console(width=80, file=io.StringIO())
    for with_run in (False, True):
        with console.capture() as captured:
            console.print(_ledger_table(rows, with_run=with_run))
        shown = captured.get()
        assert f"{RUN}:4" in shown
        assert f"{RUN}:5" in shown
        assert "…" not in shown  # what does not fit wraps, nothing is cut
