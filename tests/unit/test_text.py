"""Text people type reaches log lines, terminal tables and error messages escaped: a control
character cannot forge a line, clear the screen or restyle what follows."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from remit.cli.base import PlainTable, styled
from remit.core.errors import RemitError
from remit.core.principals import check_actor, check_principal
from remit.core.telemetry import OneLine
from remit.core.text import printable, unsafe

NASTY = "user:x\x1b[2J\nFAKE 2026-01-01 WARNING remit: all good\u202e\x00"


def test_printable_escapes_control_format_and_separator_characters() -> None:
    assert printable(NASTY) == (
        "user:x\\x1b[2J\\nFAKE 2026-01-01 WARNING remit: all good\\u202e\\x00"
    )
    assert printable("plain café, 東京 and tabs\tescaped") == "plain café, 東京 and tabs\\tescaped"
    assert not unsafe("user:ann")
    assert unsafe("a\u2028b")


@pytest.mark.parametrize("bad", [NASTY, "", "   ", "user:" + "a" * 200, "user:a\u2029b"])
def test_a_principal_no_one_could_be_is_refused_naming_it_escaped(bad: str) -> None:
    with pytest.raises(RemitError, match="a principal is 1 to 200 characters") as refused:
        check_actor(bad)
    assert not unsafe(str(refused.value))
    with pytest.raises(RemitError):
        check_principal(bad, where="by")


def test_a_log_line_stays_one_line() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(OneLine())
    logger = logging.getLogger("remit.test-one-line")
    logger.addHandler(handler)
    try:
        logger.warning("denied: %s may not %s", NASTY, "start")
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert written.count("\n") == 1
    assert "\x1b" not in written
    assert "user:x\\x1b[2J\\nFAKE" in written


def test_a_table_shows_what_a_cell_holds_and_styles_only_what_it_is_told_to() -> None:
    table = PlainTable("who", "status", box=None)
    table.add_row("[red]user:x[/] " + NASTY, styled("done", "green"))
    console = Console(file=io.StringIO(), width=300, force_terminal=True, color_system="standard")
    console.print(table)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "[red]user:x[/]" in shown  # not read as markup
    assert "\\x1b[2J\\nFAKE" in shown
    assert "\x1b[2J" not in shown  # the escape sequence itself never reaches the terminal
    assert "\x1b[32mdone" in shown  # the status is green, as it was meant to be
