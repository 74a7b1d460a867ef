"""What a wakeup's `register` op must take: the one call a stopping worker makes of it.

A worker that stops when idle calls its wakeup's `register` op (`WakeupSpec.register`) with
`{"at": <the time to wake at>}`, ISO 8601 with its offset, whichever connector declares the
op: remit's own wakeup service (`wakeup.instances.register`) or a host's own clock. An op
whose input refuses that, or takes it and drops `at` (a model with no such field ignores it),
would leave the instance stopped for good, so a type naming one is refused when its connector
is made (`check_contract_ops`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from remit.declare.ops import Op

# A registration every register op must take, and keep.
SAMPLE_WAKE = {"at": "2030-01-31T09:00:00+00:00"}


def takes_a_wake(register: Op[Any, Any]) -> bool:
    """True when `register`'s input takes `SAMPLE_WAKE` and keeps its `at`."""
    try:
        parsed = register.input.model_validate(SAMPLE_WAKE)
    except ValidationError:
        return False
    return parsed.model_dump(mode="json").get("at") is not None
