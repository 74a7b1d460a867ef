"""HTML forms generated from pydantic models: the console's draft and output editors.

`fields_of` describes one input per field of a model (its HTML kind, bounds, options, help text,
current value and error), so a template can render a form whose browser-side checks match the
model's own; `parse_form` turns the strings a browser posts back into a value validated by the
model, or into one error message per field, worded as pydantic words them. The model stays the
one judge: what the browser checks is a courtesy, and a form posted without a browser is
validated all the same.

Scalars get their own inputs (numbers, text, dates, checkboxes, selects for `Literal` and `Enum`);
`Optional[X]` is an `X` that may be left empty. Anything structured (a nested model, a list, a
dict, a union of several types) is edited as JSON in a textarea. A field's bounds are also put
in words (`hint`: "0.01 to 500.00", "at most 40 characters"), shown before anything is sent. A
field named read-only is shown, not edited; `as_posted` gives its value as the form would have
sent it, for the post to be read as a whole.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Literal, Union

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

Kind = Literal[
    "number",
    "integer",
    "text",
    "textarea",
    "checkbox",
    "select",
    "date",
    "datetime-local",
    "time",
    "email",
    "json",
]

# A string field longer than this, or whose value spans lines, is edited in a textarea.
_LONG_TEXT = 200

# The key of an error that belongs to the whole form rather than one field.
FORM = ""


@dataclass(frozen=True)
class FormField:
    """One input of a generated form.

    `name` is the input's name (`<prefix>.<field>`); `field` the model's field. `value` is the
    input's current value as the browser shows it (for a checkbox, `checked` says whether it is
    ticked). `options` are `(value, label)` pairs of a select. `min`, `max` and `step` are
    strings ready for the input's attributes; `min_length`, `max_length` and `html_pattern`
    likewise, and `hint` says them all in words. `read_only`: the field is shown, not edited.
    `error` is the message to show beside it, if any.
    """

    name: str
    field: str
    label: str
    kind: Kind
    required: bool
    value: str
    checked: bool = False
    min: str | None = None
    max: str | None = None
    step: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    help: str | None = None
    hint: str | None = None
    read_only: bool = False
    error: str | None = None

    @property
    def shown(self) -> str:
        """The value as a person reads it where it is shown rather than edited."""
        if self.kind == "checkbox":
            return "yes" if self.checked else "no"
        if self.kind == "select":
            return next((label for value, label in self.options if value == self.value), self.value)
        return self.value or "(empty)"

    @property
    def id(self) -> str:
        """An element id for the input, unique within one form's prefix."""
        return re.sub(r"[^A-Za-z0-9_-]", "-", self.name)

    @property
    def html_pattern(self) -> str | None:
        """The pattern as an HTML `pattern` attribute: the browser matches the whole value,
        pydantic searches within it, so an unanchored side is padded with `.*`."""
        if self.pattern is None:
            return None
        head = "" if self.pattern.startswith("^") else ".*"
        tail = "" if self.pattern.endswith("$") else ".*"
        return f"{head}{self.pattern}{tail}"


@dataclass(frozen=True)
class _Shape:
    """What a field's annotation comes to once `Optional` and `Annotated` are unwrapped."""

    kind: Kind
    base: Any
    nullable: bool
    constraints: dict[str, Any]
    choices: tuple[Any, ...] = ()


def field_name(prefix: str, name: str) -> str:
    """The input name of field `name` under `prefix` (`draft.amount`)."""
    return f"{prefix}.{name}" if prefix else name


def fields_of(
    model: type[BaseModel],
    values: Mapping[str, Any] | None = None,
    errors: Mapping[str, str] | None = None,
    prefix: str = "",
    *,
    read_only: Collection[str] = (),
) -> list[FormField]:
    """One `FormField` per field of `model`, in declaration order.

    `values` maps field names to current values: a model's `model_dump(mode="json")`, or the
    strings a form posted (`posted_values`); a field missing from it shows its default.
    `errors` maps field names to the message shown beside each (as `parse_form` returns them).
    The fields named in `read_only` are marked to be shown, not edited.
    """
    values = values or {}
    errors = errors or {}
    out: list[FormField] = []
    for name, info in model.model_fields.items():
        shape = _shape(info)
        current = values[name] if name in values else _default(info)
        text = _as_text(shape, current)
        kind = shape.kind
        if kind == "text" and (
            "\n" in text or (shape.constraints.get("max_length") or 0) > _LONG_TEXT
        ):
            kind = "textarea"
        lower, upper, step = _bounds(shape)
        c = shape.constraints
        out.append(
            FormField(
                name=field_name(prefix, name),
                field=name,
                label=info.title or name.replace("_", " ").capitalize(),
                kind=kind,
                required=info.is_required() and not shape.nullable and kind != "checkbox",
                value=text,
                checked=kind == "checkbox" and _truthy(current),
                min=lower,
                max=upper,
                step=step,
                min_length=c.get("min_length") if kind not in ("json",) else None,
                max_length=c.get("max_length") if kind not in ("json",) else None,
                pattern=c.get("pattern") if isinstance(c.get("pattern"), str) else None,
                options=_options(shape),
                help=info.description,
                hint=_hint(shape),
                read_only=name in read_only,
                error=errors.get(name),
            )
        )
    return out


def as_posted(fields: Iterable[FormField]) -> dict[str, str]:
    """What a browser posts for `fields` as they are shown: each input's value, and a ticked
    checkbox's `true` (an unticked one sends nothing)."""
    return {f.name: f.value for f in fields if f.kind != "checkbox" or f.checked}


def posted_values(
    model: type[BaseModel], form: Mapping[str, str | list[str]], prefix: str = ""
) -> dict[str, Any]:
    """The values a form posted for `model`'s fields, as `fields_of` shows them again: the
    strings typed, and a checkbox's tick (absent means unticked)."""
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = field_name(prefix, name)
        if _shape(info).kind == "checkbox":
            out[name] = key in form and _last(form[key]) != "false"
        elif key in form:
            out[name] = _last(form[key])
    return out


def parse_form(
    model: type[BaseModel], form: Mapping[str, str | list[str]], prefix: str = ""
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The value a form posted for `model`, validated by it: `(value, {})` with the value as
    JSON (`model_dump(mode="json")`), or `(None, errors)` mapping each field name to its
    message (`""` for an error of the whole form).

    An unticked checkbox is False; an empty input is None where the field is optional, its
    default where it has one, and missing (pydantic's "Field required") otherwise. A JSON
    field that does not parse is named with the parser's message.
    """
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    aliases: dict[str, str] = {}
    for name, info in model.model_fields.items():
        shape = _shape(info)
        key = info.alias or name
        aliases[key] = name
        posted = form.get(field_name(prefix, name))
        text = None if posted is None else _last(posted)
        if shape.kind == "checkbox":
            data[key] = text is not None and text != "false"
            continue
        if text is None:
            continue  # missing: pydantic says so, or uses the default
        if text.strip() == "" and not (shape.kind in ("text", "textarea") and text):
            if shape.nullable:
                data[key] = None
            elif shape.kind in ("text", "textarea") and not info.is_required():
                data[key] = ""
            continue
        try:
            data[key] = _from_text(shape, text)
        except ValueError as bad:
            errors[name] = str(bad)
    unreadable = set(errors)
    try:
        parsed = model.model_validate(data)
    except ValidationError as error:
        for problem in error.errors(include_url=False):
            loc = problem["loc"]
            name = aliases.get(str(loc[0]), FORM) if loc else FORM
            if name in unreadable:
                continue  # its text did not parse: that is its error
            rest = ".".join(str(part) for part in loc[1:]) if name else ".".join(map(str, loc))
            message = f"{rest}: {problem['msg']}" if rest else problem["msg"]
            errors[name] = f"{errors[name]}; {message}" if name in errors else message
        return None, errors
    if errors:
        return None, errors
    return parsed.model_dump(mode="json"), {}


def _last(posted: str | list[str]) -> str:
    if isinstance(posted, str):
        return posted
    return posted[-1] if posted else ""


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() not in ("", "false", "0", "off", "no")
    return bool(value)


def _default(info: FieldInfo) -> Any:
    if info.default is not PydanticUndefined:
        return info.default
    if info.default_factory is not None:
        return info.get_default(call_default_factory=True, validated_data={})
    return None


def _shape(info: FieldInfo) -> _Shape:
    constraints: dict[str, Any] = {}
    _collect(info.metadata, constraints)
    annotation, nullable = _unwrap(info.annotation, constraints)
    return _classify(annotation, nullable, constraints)


def _collect(metadata: Any, into: dict[str, Any]) -> None:
    """Gather the bounds pydantic and annotated-types keep as metadata objects."""
    for item in metadata:
        if isinstance(item, FieldInfo):
            _collect(item.metadata, into)
            continue
        for attr in (
            "ge",
            "gt",
            "le",
            "lt",
            "multiple_of",
            "min_length",
            "max_length",
            "pattern",
            "decimal_places",
        ):
            found = getattr(item, attr, None)
            if found is not None:
                into[attr] = found.pattern if isinstance(found, re.Pattern) else found


def _unwrap(annotation: Any, constraints: dict[str, Any]) -> tuple[Any, bool]:
    """The annotation without `Annotated` and `Optional`, and whether None is allowed."""
    nullable = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            _collect(extra, constraints)
        elif origin in (Union, types.UnionType):
            args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(args) == len(typing.get_args(annotation)):
                return annotation, nullable  # a union of several types: edited as JSON
            nullable = True
            if len(args) != 1:
                return Union[tuple(args)], nullable  # noqa: UP007 (built at run time)
            annotation = args[0]
        else:
            return annotation, nullable


def _classify(annotation: Any, nullable: bool, constraints: dict[str, Any]) -> _Shape:
    def shape(kind: Kind, choices: tuple[Any, ...] = ()) -> _Shape:
        return _Shape(kind, annotation, nullable, constraints, choices)

    if typing.get_origin(annotation) is Literal:
        return shape("select", typing.get_args(annotation))
    if not isinstance(annotation, type):
        return shape("json")
    if issubclass(annotation, enum.Enum):
        return shape("select", tuple(annotation))
    if issubclass(annotation, bool):
        return shape("checkbox")
    if issubclass(annotation, int):
        return shape("integer")
    if issubclass(annotation, (float, Decimal)):
        return shape("number")
    if issubclass(annotation, datetime):
        return shape("datetime-local")
    if issubclass(annotation, date):
        return shape("date")
    if issubclass(annotation, time):
        return shape("time")
    if annotation.__name__ in ("EmailStr", "NameEmail"):
        return shape("email")
    if issubclass(annotation, (BaseModel, list, tuple, set, frozenset, dict)):
        return shape("json")
    return shape("text")


def _bounds(shape: _Shape) -> tuple[str | None, str | None, str | None]:
    """The HTML `min`, `max` and `step` of a number or date input."""
    c = shape.constraints
    if shape.kind not in ("number", "integer", "date", "datetime-local", "time"):
        return None, None, None
    step: str | None = None
    if shape.kind == "integer":
        step = str(c.get("multiple_of") or 1)
    elif shape.kind == "number":
        if c.get("multiple_of") is not None:
            step = str(c["multiple_of"])
        elif c.get("decimal_places") is not None:
            step = str(Decimal(1).scaleb(-int(c["decimal_places"])))
        else:
            step = "any"
    # HTML bounds are inclusive; an exclusive bound is moved in by one step where steps are
    # whole (integers, decimals with places), and left as it is otherwise, for the model to
    # refuse the bound itself.
    exact = shape.kind == "integer" or (shape.kind == "number" and step not in (None, "any"))
    lower = c.get("ge")
    if lower is None and c.get("gt") is not None:
        lower = c["gt"] + Decimal(step or 1) if exact else c["gt"]
    upper = c.get("le")
    if upper is None and c.get("lt") is not None:
        upper = c["lt"] - Decimal(step or 1) if exact else c["lt"]
    return _bound_text(lower), _bound_text(upper), step


def _hint(shape: _Shape) -> str | None:
    """A field's bounds in words: `0.01 to 500.00`, `more than 0, at most 500`, `at most 40
    characters`, `matching ^sub_`; None for a field with none."""
    c = shape.constraints
    said: list[str] = []
    if shape.kind in ("number", "integer", "date", "datetime-local", "time"):
        lower = [f"{word} {_said(c[key])}" for key, word in _LOWER if key in c][:1]
        upper = [f"{word} {_said(c[key])}" for key, word in _UPPER if key in c][:1]
        if "ge" in c and "le" in c:
            said.append(f"{_said(c['ge'])} to {_said(c['le'])}")
        else:
            said += lower + upper
        if c.get("multiple_of") is not None:
            said.append(f"a multiple of {_said(c['multiple_of'])}")
        elif c.get("decimal_places") is not None:
            places = c["decimal_places"]
            said.append(f"at most {places} decimal place{'s' if places != 1 else ''}")
    elif shape.kind in ("text", "textarea", "email"):
        shortest, longest = c.get("min_length"), c.get("max_length")
        if shortest is not None and longest is not None:
            said.append(f"{shortest} to {longest} characters")
        elif longest is not None:
            said.append(f"at most {longest} characters")
        elif shortest:
            said.append(f"at least {shortest} character{'s' if shortest != 1 else ''}")
        if isinstance(c.get("pattern"), str):
            said.append(f"matching {c['pattern']}")
    return ", ".join(said) or None


_LOWER = (("ge", "at least"), ("gt", "more than"))
_UPPER = (("le", "at most"), ("lt", "less than"))


def _said(bound: Any) -> str:
    """A bound as the hint says it: a Decimal as written (`500.00`), a date in ISO form."""
    return bound.isoformat() if isinstance(bound, (date, time)) else str(bound)


def _bound_text(bound: Any) -> str | None:
    if bound is None:
        return None
    if isinstance(bound, (date, time)):
        return _as_text(_Shape("text", type(bound), False, {}), bound)
    if isinstance(bound, Decimal):
        return format(bound.normalize(), "f") if bound == bound.to_integral() else str(bound)
    return str(bound)


def _options(shape: _Shape) -> tuple[tuple[str, str], ...]:
    if shape.kind != "select":
        return ()
    options = tuple(
        (_choice_text(choice), choice.name if isinstance(choice, enum.Enum) else str(choice))
        for choice in shape.choices
    )
    return (("", "(none)"), *options) if shape.nullable else options


def _choice_text(choice: Any) -> str:
    value = choice.value if isinstance(choice, enum.Enum) else choice
    return value if isinstance(value, str) else json.dumps(value)


def _as_text(shape: _Shape, value: Any) -> str:
    """A field's value as its input holds it."""
    if value is None:
        return ""
    if shape.kind == "json":
        if isinstance(value, str):
            return value  # posted text, shown again as typed
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if shape.kind == "select":
        if isinstance(value, str) and not isinstance(value, enum.Enum):
            for choice in shape.choices:
                if _choice_text(choice) == value or _choice_raw(choice) == value:
                    return _choice_text(choice)
            return value
        return _choice_text(value)
    if shape.kind == "checkbox":
        return "true"
    if isinstance(value, datetime):
        moment: datetime = value
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        return moment.isoformat(timespec="seconds")
    if isinstance(value, (date, time)):
        return str(value.isoformat())
    if isinstance(value, str) and shape.kind == "datetime-local":
        return _local_text(value)
    return str(value)


def _local_text(value: str) -> str:
    """A stored ISO datetime as a `datetime-local` input holds it: in UTC, with no offset."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed.isoformat(timespec="seconds")


def _choice_raw(choice: Any) -> Any:
    return choice.value if isinstance(choice, enum.Enum) else choice


def _from_text(shape: _Shape, text: str) -> Any:
    """The value to validate for a field's posted text. Raises `ValueError` with a message for
    JSON that does not parse."""
    if shape.kind == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as bad:
            raise ValueError(f"Invalid JSON: {bad.msg} (line {bad.lineno}, column {bad.colno})")
    if shape.kind == "select":
        for choice in shape.choices:
            if _choice_text(choice) == text:
                return _choice_raw(choice)
        return text  # not a choice: the model names the ones it takes
    if shape.kind == "datetime-local" and _NO_OFFSET.search(text) and not _naive(shape.base):
        return f"{text}Z"  # the input shows UTC (see `_as_text`)
    return text


_NO_OFFSET = re.compile(r"T\d\d:\d\d(:\d\d(\.\d+)?)?$")


def _naive(annotation: Any) -> bool:
    return getattr(annotation, "__name__", "") == "NaiveDatetime"
