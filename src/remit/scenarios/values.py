"""The values a scenario writes: table cells, docstrings, and `$name.field` references.

A cell is read as JSON when it parses (`12`, `true`, `null`, `"12"`, `{"a": 1}`), else as the
text it is. Where the step knows the model its table fills (a workflow's input, an approval's
draft), each cell of a field the model declares is read as that field's type says instead:
`120.00` for a `Decimal` is the amount 120.00, `0042` for a `str` is the text "0042". `$name` is what an earlier step kept under that name (a given's output, a run);
`$name.field.field` a field of it. A cell or argument that is a reference alone takes the
value as it is (a number stays a number); a reference inside other text is written into it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from remit.core.errors import AppError

REF = re.compile(r"\$([A-Za-z_][\w-]*)((?:\.[\w-]+)*)")


class UnknownReference(AppError):
    """A step refers to `$name` that no earlier step made, or to a field it does not have."""


def cell(text: str) -> Any:
    """A cell's value: its JSON when it parses, else its text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class Names:
    """What the scenario's steps made, by name: what `$name.field` reads."""

    def __init__(self) -> None:
        self._values: dict[str, Callable[[], Any]] = {}

    def keep(self, name: str, value: Any) -> None:
        self._values[name] = lambda: value

    def keep_live(self, name: str, read: Callable[[], Any]) -> None:
        """Keep `name` as what `read()` returns each time it is referred to (a run's row)."""
        self._values[name] = read

    def values(self) -> dict[str, Any]:
        """Every name and its value now."""
        return {name: read() for name, read in self._values.items()}

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def known(self) -> str:
        return ", ".join(f"${name}" for name in sorted(self._values)) or "nothing yet"

    def get(self, name: str, path: str = "") -> Any:
        """The value of `$name` and its `.field` path; `UnknownReference` naming what exists."""
        if name not in self._values:
            raise UnknownReference(
                f"${name}{path} refers to ${name}, which no earlier step made (the scenario "
                f"has {self.known()}): name it in an earlier step (`as ${name}`)"
            )
        value = self._values[name]()
        walked = f"${name}"
        for part in filter(None, path.split(".")):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                fields = (
                    ", ".join(sorted(map(str, value)))
                    if isinstance(value, Mapping)
                    else type(value).__name__
                )
                raise UnknownReference(
                    f"${name}{path}: {walked} has no `{part}` (it has: {fields or 'no fields'})"
                )
            walked += f".{part}"
        return value

    def resolve(self, value: Any) -> Any:
        """`value` with its references replaced: in text, in lists and in mappings."""
        if isinstance(value, str):
            whole = REF.fullmatch(value)
            if whole:
                return self.get(whole.group(1), whole.group(2))
            return REF.sub(lambda m: _text(self.get(m.group(1), m.group(2))), value)
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if isinstance(value, Mapping):
            return {key: self.resolve(item) for key, item in value.items()}
        return value

    def resolve_cell(self, text: str, annotation: Any = None) -> Any:
        """A table cell: a reference alone is its value, else the cell read as JSON, or as
        the type `annotation` when given (see `typed_cell`)."""
        if REF.fullmatch(text):
            return self.resolve(text)
        if annotation is not None:
            typed = typed_cell(self.resolve(text), annotation)
            if typed is not None:
                return typed[0]
        return self.resolve(cell(text))


def typed_cell(text: str, annotation: Any) -> tuple[Any] | None:
    """A cell read as the type `annotation` says, in its JSON form (a `Decimal` of `120.00` is
    `"120.00"`): as a JSON value of that type, else as text of it (a number as text first, so
    its digits stay as written). None when it is neither, so the model, given the cell as
    JSON, says what is wrong with it."""
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    reads = [adapter.validate_json, adapter.validate_python]
    as_json = cell(text)
    if isinstance(as_json, int | float) and not isinstance(as_json, bool):
        reads.reverse()  # a number's digits as written: `120.00` stays 120.00 for a Decimal
    for read in reads:
        try:
            value = read(text)
        except (ValidationError, ValueError):
            continue
        return (adapter.dump_python(value, mode="json"),)
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def fields_table(
    table: Sequence[Sequence[str]] | None,
    names: Names,
    *,
    what: str,
    model: type[BaseModel] | None = None,
) -> dict[str, Any]:
    """A two-column table of `field | value` rows (a header row `field | value` is optional)
    as a dict, its values read as cells: as `model`'s fields' types say, when it is given."""
    if not table:
        return {}
    rows = list(table)
    if [c.strip().lower() for c in rows[0]] == ["field", "value"]:
        rows = rows[1:]
    found: dict[str, Any] = {}
    for row in rows:
        if len(row) != 2:
            raise AppError(
                f"{what}: each row of the table is `| field | value |`; one has {len(row)} cells"
            )
        declared = model.model_fields.get(row[0]) if model is not None else None
        found[row[0]] = names.resolve_cell(
            row[1], declared.annotation if declared is not None else None
        )
    return found


def cell_texts(table: Sequence[Sequence[str]] | None) -> dict[str, str]:
    """A `field | value` table's cells as written: what a then also accepts, where the value
    found is written the same (`120.00` matches the amount `"120.00"`)."""
    rows = [list(row) for row in table or () if len(row) == 2]
    if rows and [c.strip().lower() for c in rows[0]] == ["field", "value"]:
        rows = rows[1:]
    return {row[0]: row[1] for row in rows}


def rows_table(table: Sequence[Sequence[str]] | None) -> list[dict[str, str]]:
    """A table with a header row as one dict per row, by the header's names."""
    if not table:
        return []
    header, *rows = table
    return [dict(zip(header, row, strict=True)) for row in rows]


def doc_json(doc: str, names: Names, *, what: str) -> Any:
    """A docstring's JSON, its references resolved."""
    try:
        parsed = json.loads(doc)
    except ValueError as error:
        raise AppError(f"{what}: the docstring is not JSON ({error})") from None
    return names.resolve(parsed)
