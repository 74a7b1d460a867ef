"""Text people type, made safe to show: a principal, a reason, a key or an id goes into log
lines, terminal tables and error messages, where a control character could forge a line,
clear the screen or recolour what follows."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

# Control characters, format characters (bidirectional overrides among them), the Unicode
# line and paragraph separators, and lone surrogates (undecodable bytes of a command line,
# which no terminal, log file or database encoding can write).
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def unsafe(text: str) -> bool:
    """Whether `text` holds a character `printable` would escape."""
    return any(unicodedata.category(char) in _UNSAFE for char in text)


def printable(text: str) -> str:
    """`text` with each control, format or separator character written as its escape (`\\n`,
    `\\x1b`, `\\u202e`), so that it shows as one line of what was typed."""
    if not unsafe(text):
        return text
    return "".join(
        _escape(char) if unicodedata.category(char) in _UNSAFE else char for char in text
    )


def _escape(char: str) -> str:
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def describe_seconds(seconds: float) -> str:
    """A length of time as a person reads it: `42s`, `1m30s`, `2d`."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.3g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# How much of what was sent an error message quotes, and how many field problems it lists.
EXCERPT = 80
PROBLEMS = 20


def excerpt(value: Any, width: int = EXCERPT) -> str:
    """At most `width` characters of `value` (as JSON, unless it is text), then `…` if there
    was more: what an error message quotes of what was sent."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[:width] + "…"


def listed(problems: list[str], *, most: int = PROBLEMS) -> str:
    """At most `most` problems, `; `-joined, then how many more there were."""
    shown = "; ".join(problems[:most])
    more = len(problems) - most
    return shown + (f"; and {more:,} more" if more > 0 else "")
