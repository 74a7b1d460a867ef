"""How much a person, a workflow or a driver may send remit at once, and the one check of it.

A run's input, a step's or a run's output, an op call's input and output, an approval's draft
and its edits are each measured as the UTF-8 bytes of their compact JSON, against a cap from
the settings (`REMIT_MAX_INPUT_BYTES` and its siblings); a reason is counted in characters.
`check_json` walks a value once and refuses, before anything is written, text holding a NUL
character (`InputInvalid`, naming the field: Postgres cannot keep one, and SQLite must refuse
what Postgres does), a value nested deeper than `REMIT_MAX_JSON_DEPTH`, a number JSON cannot
hold (NaN, an infinity: Postgres refuses them and SQLite would keep them) or an integer of more
digits than Python turns into text, and a value past its cap (`TooLarge`, naming the
setting to raise). `parse_json` refuses the same in JSON text, before and while parsing it.

The caps in force are the process's: a `Client` (and so a worker, a server, a harness) puts
its settings' caps in force when it is made (`use`), and until then the defaults are.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remit.core.errors import InputInvalid, TooLarge
from remit.core.text import excerpt

if TYPE_CHECKING:
    from remit.core.settings import Settings

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Limits:
    """The caps, each with the setting that changes it (see `Settings`)."""

    input_bytes: int = 2 * MiB
    output_bytes: int = 2 * MiB
    op_bytes: int = 2 * MiB
    draft_bytes: int = 256 * KiB
    reason_chars: int = 4000
    body_bytes: int = 4 * MiB
    json_depth: int = 100

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            input_bytes=settings.max_input_bytes,
            output_bytes=settings.max_output_bytes,
            op_bytes=settings.max_op_bytes,
            draft_bytes=settings.max_draft_bytes,
            reason_chars=settings.max_reason_chars,
            body_bytes=settings.max_body_bytes,
            json_depth=settings.max_json_depth,
        )


# The setting behind each cap, named in every refusal.
SETTINGS = {
    "input_bytes": "REMIT_MAX_INPUT_BYTES",
    "output_bytes": "REMIT_MAX_OUTPUT_BYTES",
    "op_bytes": "REMIT_MAX_OP_BYTES",
    "draft_bytes": "REMIT_MAX_DRAFT_BYTES",
    "reason_chars": "REMIT_MAX_REASON_CHARS",
    "body_bytes": "REMIT_MAX_BODY_BYTES",
    "json_depth": "REMIT_MAX_JSON_DEPTH",
}

_in_force = Limits()


def use(limits: Limits) -> None:
    """Put `limits` in force in this process."""
    global _in_force
    _in_force = limits


def current() -> Limits:
    """The caps in force in this process."""
    return _in_force


def check_json(
    value: Any,
    *,
    what: str,
    cap: str,
    target: str,
    after: str = "pass a reference to the data instead, or raise the limit",
    limit: int | None = None,
) -> int:
    """Refuse `value` (named `what`, e.g. "the run's input") if any text in it, a key or a
    string, holds a NUL character (`InputInvalid` naming the field, for `target`), or if its
    compact JSON is more UTF-8 bytes than the cap `cap` (a field of `Limits`; `limit` in place
    of the one in force). Returns its size. Pure: it reads the value and nothing else."""
    bound = getattr(_in_force, cap) if limit is None else limit
    size = 0
    for path, text, length in _walk(value, ()):
        if len(path) > _in_force.json_depth:
            raise too_deep(what, target=target, depth=_in_force.json_depth)
        if length == _HUGE:
            raise huge_integer(what, path, target=target)
        if length == _NOT_FINITE:
            raise not_finite(what, path, target=target)
        if text is not None and "\x00" in text:
            raise nul_refused(what, path, target=target)
        if text is not None and _SURROGATE.search(text):
            raise surrogate_refused(what, path, target=target)
        size += length
    if size > bound:
        shown = size_text(size)
        if shown == size_text(bound):
            shown = f"{size:,} bytes"  # just over: the rounded size would read as the limit
        raise TooLarge(
            f"{what} is {shown}, over the {size_text(bound)} limit ({SETTINGS[cap]}): {after}",
            what=what,
            size=size,
            limit=bound,
            setting=SETTINGS[cap],
        )
    return size


def check_text(
    text: str | None, *, what: str, target: str, cap: str = "reason_chars", limit: int | None = None
) -> None:
    """Refuse a free text a person sends (a reason, a note): a NUL character in it
    (`InputInvalid`), or more characters than the cap (`TooLarge`)."""
    if text is None:
        return
    if not isinstance(text, str):
        raise InputInvalid(
            f"{what} must be text, not {type(text).__name__}",
            target=target,
            errors=[{"loc": [], "msg": "not text", "type": "string_type"}],
        )
    if "\x00" in text:
        raise nul_refused(what, (), target=target)
    bound = getattr(_in_force, cap) if limit is None else limit
    if len(text) > bound:
        raise TooLarge(
            f"{what} is {len(text):,} characters, over the {bound:,} character limit "
            f"({SETTINGS[cap]}): shorten it, or raise the limit",
            what=what,
            size=len(text),
            limit=bound,
            setting=SETTINGS[cap],
            unit="characters",
        )


def check_limit(limit: object, *, where: str) -> int:
    """A list's `limit`: a whole number of 1 or more. Zero or less is refused, never taken as
    "everything"."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputInvalid(
            f"{where}: limit must be a whole number of 1 or more, got {excerpt(repr(limit))}: "
            "ask for how many rows to return, e.g. 50",
            target=where,
            errors=[{"loc": ["limit"], "msg": "must be 1 or more", "type": "greater_than_equal"}],
        )
    return limit


def nul_refused(what: str, path: tuple[Any, ...], *, target: str) -> InputInvalid:
    """The refusal of a NUL character at `path` in `what`."""
    return _unstorable(
        what,
        path,
        target=target,
        holds="a NUL character (\\u0000)",
        why="which no text remit keeps may hold: remove it",
        kind="nul",
    )


# A lone surrogate: half of a UTF-16 pair, which no UTF-8 text (nor either database) can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_refused(what: str, path: tuple[Any, ...], *, target: str) -> InputInvalid:
    """The refusal of a lone surrogate (`\\ud800`) at `path` in `what`."""
    return _unstorable(
        what,
        path,
        target=target,
        holds="a lone surrogate (half of a UTF-16 pair, e.g. \\ud800)",
        why="which is not text: send the whole character, or remove it",
        kind="surrogate",
    )


def _unstorable(
    what: str, path: tuple[Any, ...], *, target: str, holds: str, why: str, kind: str
) -> InputInvalid:
    where = ".".join(str(part) for part in path)
    field = f"{what}, at `{where}`," if where else what
    return InputInvalid(
        f"{field} holds {holds}, {why}. Nothing was written",
        target=target,
        errors=[{"loc": list(path), "msg": f"holds {holds}", "type": kind}],
    )


def size_text(size: int) -> str:
    """A size as a person reads it: `812 bytes`, `3.5 KiB`, `10.5 MiB`."""
    if size < KiB:
        return f"{size} bytes"
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if size >= scale:
            shown = f"{size / scale:.1f}".removesuffix(".0")
            return f"{shown} {unit}"
    return f"{size} bytes"  # pragma: no cover


def _walk(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str | None, int]]:
    """Each piece of `value`'s compact JSON: its path, its text if it is text (a key or a
    string), and its size in UTF-8 bytes."""
    if isinstance(value, str):
        yield path, value, _string_bytes(value)
    elif value is None or isinstance(value, bool):
        yield path, None, 4 if value in (None, True) else 5
    elif isinstance(value, int) and not _writable(value):
        yield path, None, _HUGE
    elif isinstance(value, float) and not math.isfinite(value):
        yield path, None, _NOT_FINITE
    elif isinstance(value, int | float):
        yield path, None, len(json.dumps(value))
    elif isinstance(value, Mapping):
        yield path, None, 2 + max(len(value) - 1, 0)  # the braces and commas
        for key, item in value.items():
            name = key if isinstance(key, str) else str(key)
            yield (*path, name), name, _string_bytes(name) + 1  # the colon
            yield from _walk(item, (*path, name))
    elif isinstance(value, list | tuple):
        yield path, None, 2 + max(len(value) - 1, 0)
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))
    elif hasattr(value, "model_dump"):
        yield from _walk(value.model_dump(mode="json"), path)
    else:
        text = str(value)
        yield path, text, _string_bytes(text)


# The sizes `_walk` gives a number that no JSON remit keeps can hold, for `check_json` to refuse.
_HUGE = -1  # an integer of more digits than Python writes
_NOT_FINITE = -2  # NaN or an infinity: JSON has neither, and Postgres refuses both


def not_finite(what: str, path: tuple[Any, ...], *, target: str) -> InputInvalid:
    """The refusal of NaN or an infinity at `path` in `what`."""
    return _unstorable(
        what,
        path,
        target=target,
        holds="a number that is not finite (NaN or an infinity)",
        why="which JSON has no way to write: send null, or a number",
        kind="not_finite",
    )


def _writable(number: int) -> bool:
    """Whether Python turns `number` into text (`sys.get_int_max_str_digits`); 3.32 bits a digit."""
    most = sys.get_int_max_str_digits()
    if most == 0 or number.bit_length() < most * 3:
        return True
    try:
        str(number)
    except ValueError:
        return False
    return True


def parse_json(text: str | bytes, what: str, *, around: int = 0, **options: Any) -> Any:
    """`text` parsed as JSON (`options` as `json.loads` takes them), refused (`InputInvalid`,
    naming `what`) when it is nested deeper than `REMIT_MAX_JSON_DEPTH` (and `around` levels
    more: a request's own fields around the values it carries, which `check_json` then holds
    to the cap exactly) or holds an integer of more digits than Python turns into text. A
    `json.JSONDecodeError` is the caller's to word."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise too_deep(what, target=what, depth=_in_force.json_depth) from None
    except json.JSONDecodeError:
        raise
    except ValueError as error:
        if "integer string conversion" not in str(error):
            raise
        raise huge_integer(what, (), target=what) from None
    if _deeper_than(value, _in_force.json_depth + around):
        raise too_deep(what, target=what, depth=_in_force.json_depth)
    return value


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether a value in `value` lies more than `depth` keys and indexes from its top."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        each, level = pending.pop()
        items = each.values() if isinstance(each, dict) else each if isinstance(each, list) else ()
        if items and level == depth:
            return True
        pending.extend((item, level + 1) for item in items)
    return False


def too_deep(what: str, *, target: str, depth: int) -> InputInvalid:
    """The refusal of a value nested more than `depth` levels deep."""
    return InputInvalid(
        f"{what} is nested more than {depth} levels deep (REMIT_MAX_JSON_DEPTH): flatten it, "
        "or raise the limit. Nothing was written",
        target=target,
        errors=[{"loc": [], "msg": f"nested more than {depth} levels", "type": "too_deep"}],
    )


def huge_integer(what: str, path: tuple[Any, ...], *, target: str) -> InputInvalid:
    """The refusal of an integer of more digits than Python turns into text."""
    return _unstorable(
        what,
        path,
        target=target,
        holds=f"an integer of more than {sys.get_int_max_str_digits():,} digits",
        why="more than remit reads or writes: send it as a string",
        kind="huge_integer",
    )


def _string_bytes(text: str) -> int:
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2  # nothing to escape: the text and its quotes
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))
