"""The tries of one op call: its driver called until it answers, fails for good, or fails in a
way that leaves unknown whether the vendor acted.

A failed try is tried again only when the error says a retry can help and repeating the call
cannot double its effect, after the delay the op's retry policy gives (`core/backoff.py`),
slept on the injected clock. A write that is not idempotent and may have reached the vendor is
never tried again: its outcome is unknown, and a person is asked (`calls.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from remit.connectors.base import CallContext, Implementation
from remit.connectors.credentials import SecretError
from remit.core.backoff import next_delay
from remit.core.clock import Clock
from remit.core.errors import DriverError, MissingCredential
from remit.core.outcome import CredentialFailure, DriverFailure
from remit.declare.ops import Op

log = logging.getLogger("remit.calls")


@dataclass(frozen=True)
class Answered:
    """The driver answered `output` on try number `tries`."""

    output: BaseModel
    tries: int


@dataclass(frozen=True)
class GaveUp:
    """The call failed and is not tried again: `failure` says why."""

    failure: DriverFailure | CredentialFailure
    tries: int


@dataclass(frozen=True)
class Unknown:
    """A write that cannot be repeated safely failed in a way that may have reached the
    vendor: whether it happened is unknown, and `message` says so."""

    message: str
    tries: int


Tried = Answered | GaveUp | Unknown


def make_tries(
    op: Op[Any, Any],
    implementation: Implementation,
    request: BaseModel,
    call: CallContext,
    *,
    clock: Clock,
    retrying: Callable[[int], None],
) -> Tried:
    """Call `op`'s driver with `request` until the call comes to an end. `retrying(tries)` is
    told before each try again, with the number of tries so far."""
    tries = 0
    while True:
        tries += 1
        try:
            output = implementation.invoke(op, request, call)
        except DriverError as error:
            if op.effect == "write" and not op.idempotent and error.maybe_applied:
                return Unknown(
                    f"op `{op.id}` (key {call.idempotency_key}) failed in a way that may have "
                    f"reached the vendor ({error}): it is not idempotent, so remit will not call "
                    "it again; check with the vendor whether it happened",
                    tries,
                )
            delay = next_delay(
                op.retry,
                safe_to_repeat=op.safe_to_repeat or not error.maybe_applied,
                retryable=error.retryable,
                tries=tries,
            )
            if delay is None:
                return GaveUp(DriverFailure.of(error), tries)
            log.info("%s failed (%s); trying again in %.2fs", op.id, error, delay)
            retrying(tries)
            clock.sleep(delay)
            continue
        except MissingCredential as error:
            return GaveUp(CredentialFailure(message=str(error), variable=error.variable), tries)
        except SecretError as error:
            message = f"op `{op.id}` cannot read the credential `{error.name}`: {error}"
            return GaveUp(CredentialFailure(message=message, variable=error.name or ""), tries)
        except Exception as error:
            # Not a DriverError: a bug, or output that does not parse. The vendor may have
            # acted before it, so a write that cannot be repeated safely is uncertain.
            message = f"op `{op.id}` raised {type(error).__name__}: {error}"
            if op.effect == "write" and not op.safe_to_repeat:
                return Unknown(message + "; its outcome is unknown", tries)
            if isinstance(error, ValidationError):
                message = f"op `{op.id}` returned output that does not parse: {error}"
            return GaveUp(DriverFailure(message=message, retryable=False), tries)
        return Answered(output, tries)
