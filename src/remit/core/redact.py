"""Redaction: known secret values replaced by a marker naming the secret, before they are kept.

A `Redactor` knows some secrets, each a name and a value, and replaces every occurrence of a
value by `[redacted:NAME]`, in a string or in strings anywhere inside a JSON value (dict keys
too), and in an exception's message and fields. The marker names the secret and holds no part
of its value. Values shorter than `SHORTEST` (6) characters are not redacted: so short a value
is common text ("admin", "1234"), and replacing it everywhere would garble messages while
hiding little. Where two secrets' values occur at one place, the longer wins; where they
overlap without one holding the other, the whole stretch is replaced by one marker naming both,
so no piece of either is left.

Which secrets are known, and where redaction is applied, is decided elsewhere: the values of a
driver's credentials and an app's stored secrets are gathered in `connectors/redaction.py`,
where a driver's answer or error enters remit. This module also keeps what the process has
learned so far, for `RedactLogs`: a logging filter, put on remit's and DBOS's loggers and on
the handlers of the root logger, that redacts those values from every record as a safety net.

Only exact occurrences are found: a value that was encoded (URL-quoted, base64, split) before
it was written into a message is not recognised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

from remit.core.errors import DriverError

# Values shorter than this are not redacted (see the module's docstring).
SHORTEST = 6


def marker(*names: str) -> str:
    """What stands in for the values of the secrets `names`."""
    return f"[redacted:{','.join(names)}]"


class RedactedError(Exception):
    """Stands for an exception whose text held a secret and could not be redacted in place
    (its message is computed from state remit cannot reach). `type_name` is the original's."""

    def __init__(self, message: str, *, type_name: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


@dataclass(frozen=True)
class Redactor:
    """Replaces the values of known secrets; `values` pairs each value with its secret's name,
    longest value first. Made with `Redactor.of`."""

    values: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, secrets: Iterable[tuple[str, str]] | Mapping[str, str]) -> Redactor:
        """A redactor for `secrets`, pairs of name and value (or a mapping of name to value).
        A value shorter than `SHORTEST` is left out; one value under two names keeps the name
        that sorts first."""
        pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
        named: dict[str, str] = {}
        for name, value in sorted(pairs):
            if isinstance(value, str) and len(value) >= SHORTEST:
                named.setdefault(value, name)
        return cls(tuple(sorted(named.items(), key=lambda item: (-len(item[0]), item[0]))))

    def __bool__(self) -> bool:
        return bool(self.values)

    def merged(self, other: Redactor) -> Redactor:
        """A redactor that knows both sets of secrets."""
        if not other.values:
            return self
        if not self.values:
            return other
        return Redactor.of([(name, value) for value, name in (*self.values, *other.values)])

    def finds(self, text: str) -> bool:
        """Whether `text` holds the value of a known secret."""
        return any(value in text for value, _ in self.values)

    def names_in(self, value: Any) -> list[str]:
        """The names of the secrets whose values occur in `value` (text or JSON), sorted."""
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return sorted({name for secret, name in self.values if secret in text})

    def text(self, text: str) -> str:
        """`text` with every known value replaced by its marker."""
        spans = self._spans(text)
        if not spans:
            return text
        parts: list[str] = []
        at = 0
        for start, end, names in spans:
            parts.append(text[at:start])
            parts.append(marker(*names))
            at = end
        parts.append(text[at:])
        return "".join(parts)

    def _spans(self, text: str) -> list[tuple[int, int, list[str]]]:
        """Where known values occur in `text`: stretches to replace, each with the names of
        the secrets it covers. An occurrence inside a longer one is part of it; occurrences
        that overlap are one stretch."""
        found: list[tuple[int, int, str]] = []
        for value, name in self.values:
            at = text.find(value)
            while at != -1:
                found.append((at, at + len(value), name))
                at = text.find(value, at + 1)
        found.sort(key=lambda each: (each[0], -each[1]))
        spans: list[tuple[int, int, list[str]]] = []
        for start, end, name in found:
            if spans and start < spans[-1][1]:
                last = spans[-1]
                if end > last[1]:
                    spans[-1] = (last[0], end, last[2] + ([] if name in last[2] else [name]))
                continue
            spans.append((start, end, [name]))
        return spans

    def json(self, value: Any) -> Any:
        """`value` with every string inside it redacted: dict keys and values, list and tuple
        items, at any depth. Other values are returned as they are; a value that holds no
        secret is returned itself."""
        if not self.values or not self.finds("\0".join(_strings(value))):
            return value
        return self._json(value)

    def _json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                (self.text(key) if isinstance(key, str) else key): self._json(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self._json(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._json(item) for item in value)
        return value

    @overload
    def exception(self, error: Exception) -> Exception: ...
    @overload
    def exception(self, error: BaseException) -> BaseException: ...
    def exception(self, error: BaseException) -> BaseException:
        """Redact `error` in place (its arguments, its attributes, its notes, and the errors it
        was raised from) and return it, so it is re-raised as the same class with its
        traceback. If its text still holds a secret (a message computed from state out of
        reach), return a stand-in instead: a `DriverError` with the same fields for a driver
        error, else a `RedactedError` naming the original's class."""
        if not self.values:
            return error
        self._scrub_chain(error)
        if not self.finds(_shown(error)):
            return error
        message = self.text(_shown(error))
        stand_in: Exception
        if isinstance(error, DriverError):
            stand_in = DriverError(
                message,
                retryable=error.retryable,
                status=error.status,
                vendor_code=error.vendor_code,
                maybe_applied=error.maybe_applied,
                op=error.op,
            )
        else:
            stand_in = RedactedError(message, type_name=type(error).__name__)
        stand_in.__cause__ = error.__cause__
        stand_in.__suppress_context__ = True
        return stand_in.with_traceback(error.__traceback__)

    def _scrub_chain(self, error: BaseException, seen: set[int] | None = None) -> None:
        """Redact `error` and the errors it was raised from or during, in place. A chained
        error whose text still holds a secret is cut off, rather than shown in a traceback."""
        seen = set() if seen is None else seen
        if id(error) in seen:
            return
        seen.add(id(error))
        self._scrub(error)
        for link in ("__cause__", "__context__"):
            chained = getattr(error, link)
            if chained is not None:
                self._scrub_chain(chained, seen)
                if self.finds(_shown(chained)):
                    setattr(error, link, None)

    def _scrub(self, error: BaseException) -> None:
        """Redact one exception's arguments and attributes in place, as far as they allow."""
        with contextlib.suppress(TypeError, AttributeError):
            error.args = tuple(self.json(arg) for arg in error.args)
        for attr, value in list(getattr(error, "__dict__", {}).items()):
            redacted = self.json(value)
            if redacted is not value and redacted != value:
                with contextlib.suppress(TypeError, AttributeError):
                    setattr(error, attr, redacted)
        if isinstance(error, OSError):
            for attr in ("strerror", "filename", "filename2"):
                value = getattr(error, attr, None)
                if isinstance(value, str) and self.finds(value):
                    setattr(error, attr, self.text(value))


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, keys too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _shown(error: BaseException) -> str:
    """What an error shows of itself: its message, or its repr if the message fails."""
    try:
        return str(error)
    except Exception:
        try:
            return repr(error)
        except Exception:
            return type(error).__name__


# -- what this process knows, for its log lines ------------------------------------------------

_known = Redactor()
_known_lock = threading.Lock()
# Loggers whose records are redacted at the source, with all those under them; and how many
# loggers existed when they were last looked for (a module imported later adds its own).
_LOGGERS = ("remit", "dbos")
_UNDER = tuple(f"{name}." for name in _LOGGERS)
_loggers_seen = -1


def learn(redactor: Redactor) -> None:
    """Add `redactor`'s secrets to what this process redacts from its log lines, and put
    `RedactLogs` on remit's and DBOS's loggers (and the root logger's handlers) if it is not
    there yet. Values once learned stay known: an old value of a changed secret is still one."""
    global _known
    with _known_lock:
        if redactor.values and not set(redactor.values) <= set(_known.values):
            _known = _known.merged(redactor)
        if _known.values:
            _install()


def known() -> Redactor:
    """What this process has learned so far (see `learn`)."""
    return _known


def forget() -> None:
    """Forget every value learned so far (for tests of the filter)."""
    global _known
    with _known_lock:
        _known = Redactor()


class RedactLogs(logging.Filter):
    """Redacts the values of known secrets from a log record: its message with its arguments,
    its exception (redacted in place, with its chain), its formatted traceback and stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = _known
        if not redactor:
            return True
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        if redactor.finds(message):
            record.msg, record.args = redactor.text(message), None
        if record.exc_info and record.exc_info[1] is not None:
            error = redactor.exception(record.exc_info[1])
            if error is not record.exc_info[1]:
                record.exc_info = (type(error), error, error.__traceback__)
        for attr in ("exc_text", "stack_info"):
            text = getattr(record, attr, None)
            if isinstance(text, str) and redactor.finds(text):
                setattr(record, attr, redactor.text(text))
        return True


_FILTER = RedactLogs()


def _install() -> None:
    """Put the one `RedactLogs` on remit's and DBOS's loggers (a logger's filter sees only the
    records made by that logger, so each one under them too) and on the root logger's and
    DBOS's handlers (which see records of every logger, made later too)."""
    global _loggers_seen
    manager = logging.Logger.manager
    if len(manager.loggerDict) != _loggers_seen:
        _loggers_seen = len(manager.loggerDict)
        loggers = [logging.getLogger(name) for name in _LOGGERS] + [
            logger
            for name, logger in list(manager.loggerDict.items())
            if isinstance(logger, logging.Logger) and name.startswith(_UNDER)
        ]
        for logger in loggers:
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
    for logger in (logging.getLogger(), logging.getLogger("dbos")):
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
