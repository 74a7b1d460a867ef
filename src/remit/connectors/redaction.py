"""Secrets stay secret: a driver's answer and error are redacted where they enter remit.

Every value that is a secret is replaced by a marker naming it (`[redacted:MAIL_TOKEN]`, see
`core/redact.py`) at the boundary where a driver's answer or error enters remit:
`Implementation.invoke`. An error the driver raises (a `DriverError`, or anything else: a bug,
a `ValueError` with the token in it) has its message and fields redacted in place and is
raised again as the same class; an output is redacted before it is parsed as the op's output
model. So everything downstream only ever sees redacted text: the tries and their log lines,
the ledger row, the call's `Outcome` (which is DBOS's checkpoint of the step), the workflow's
later steps, the run's output and error, a task's reason, the audit and activity rows.

A redacted output must still parse as the op's output model: when it does not (a field that
must be 40 characters long now holds a marker), the call fails with a `DriverError` saying
which secret the output held, and the value is kept nowhere.

What is secret, for a call: the values of the credentials its driver declares
(`Driver.credentials`, as the call's `CallContext.environ` gives them: the environment, else a
stored secret) and the values of every secret the app stores (`remit secrets set`), whichever
the driver read. The stored ciphertexts are read again once those read are as old as a
secret's value may be in a worker (`Credentials.cache_seconds`, one small query), and only a
ciphertext not seen before is decrypted: a secret set by another process is known by the time
a driver can be given it, and a step pays a query every few seconds, not on every call. A variable the driver reads without
declaring it is not known, unless it is also stored.

The same secrets redact a `ctx.step`'s value and error and the workflow's return value and
error (`execution/context.py`, `ops/runtime.py`), for a workflow that read a secret some other
way. Every value learned is also given to the logging filter (`core/redact.RedactLogs`), which
redacts remit's and DBOS's log lines as a safety net. A collection's records (the app's own
data, in its database) are not redacted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from remit.connectors.credentials import Credentials, SecretError
from remit.core.errors import DriverError
from remit.core.redact import Redactor, learn, marker
from remit.declare.ops import Op


def call_secrets(environ: Mapping[str, str], declared: Iterable[str]) -> Redactor:
    """The secrets of a call whose driver declares the credentials `declared` and sees
    `environ`: their values, and every stored secret's if `environ` holds the app's. Learned
    by the log filter too."""
    pairs: list[tuple[str, str]] = []
    if isinstance(environ, Credentials):
        pairs.extend(environ.stored_values())
    for name in declared:
        try:
            value = environ.get(name)
        except SecretError:
            continue  # unreadable: the call's own check of its credentials says so
        if value:
            pairs.append((name, value))
    redactor = Redactor.of(pairs)
    learn(redactor)
    return redactor


def app_secrets(environ: Mapping[str, str], implementations: Iterable[object]) -> Redactor:
    """The secrets of any call the app makes: every stored one, and the credentials each of
    `implementations` declares."""
    declared = {
        name
        for implementation in implementations
        for name in getattr(implementation, "credentials", ())
    }
    return call_secrets(environ, sorted(declared))


def redacted_output(redactor: Redactor, op: Op[Any, Any], result: Any) -> BaseModel:
    """`result` (an output model or a dict) as `op`'s output model, with secrets redacted.
    An output that, redacted, no longer parses is a `DriverError` naming the secrets."""
    if not redactor:
        return _parsed(op, result)
    raw = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    redacted = redactor.json(raw)
    if redacted == raw:
        return _parsed(op, result)
    try:
        return _parsed(op, redacted)
    except ValidationError as error:
        names = redactor.names_in(raw)
        raise DriverError(
            f"op `{op.id}` answered output holding the value of the secret "
            f"{', '.join(names)}; with it redacted ({marker(*names)}) the output does not parse "
            f"as {op.output.__name__}: {error}. A driver's output is stored: return no "
            "credential in it",
            retryable=False,
            maybe_applied=True,
            op=op.id,
        ) from None


def _parsed(op: Op[Any, Any], value: Any) -> BaseModel:
    output: BaseModel = op.output.model_validate(value)
    return output
