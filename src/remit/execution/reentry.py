"""What a call that finds a ledger row under its key may do: one policy for a run's op calls
(`calls.py`) and direct calls (`direct.py`).

A run's call re-enters its row when DBOS retries its step or a later attempt reaches the same
step; a direct call when its caller's `--key` is given again. `reenter` reads the row and the
call and decides; it writes nothing. Each side acts on the decision its own way: a run's call
fails on a `Conflict` and waits at a task on `Hold`, where a direct call refuses both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remit.core.ledger import LedgerRow, on_reentry
from remit.core.outcome import Outcome
from remit.declare.ops import Op


@dataclass(frozen=True)
class Replay:
    """The row records the call's outcome (`ok` or `failed`): return it, call nothing."""

    outcome: Outcome


@dataclass(frozen=True)
class CallAgain:
    """Call again with the same key: a person confirmed the earlier call did not happen
    (`not_done`), or it never recorded an outcome and repeating it cannot double it."""

    not_done: bool


@dataclass(frozen=True)
class Hold:
    """The earlier call may have happened and repeating it could double it, or its row is
    already `uncertain`: nothing is called until a person says whether it happened."""


@dataclass(frozen=True)
class Conflict:
    """The key belongs to another call: `existing` is of another op (`same_op` False), or of
    the same op with other input."""

    existing: LedgerRow
    same_op: bool


Reentry = Replay | CallAgain | Hold | Conflict


def reenter(
    existing: LedgerRow, op: Op[Any, Any], input_hash: str, *, afresh: bool = False
) -> Reentry:
    """What the call of `op` with input hashing to `input_hash` may do, finding `existing`
    under its key. `afresh`: a read that costs nothing is made again rather than replayed (a
    run's step running again; a direct call's key replays)."""
    other = conflict(existing, op.id, input_hash)
    if other is not None:
        return other
    if afresh and op.effect == "read" and op.cost is None and existing.status in ("ok", "failed"):
        # A read that costs nothing is made again whenever its step runs again (a retry from
        # an earlier step reads afresh); its row only shows it. One with a cost replays.
        return CallAgain(not_done=False)
    decision = on_reentry(existing.status, safe_to_repeat=op.safe_to_repeat)
    if decision == "call":
        return CallAgain(not_done=existing.status == "not_done")
    if decision == "uncertain" or existing.status == "uncertain":
        # An uncertain row replays as what it records: a call that waits for a person.
        return Hold()
    return Replay(existing.outcome)


def conflict(existing: LedgerRow, op_id: str, input_hash: str) -> Conflict | None:
    """A `Conflict` when `existing` is not a call of `op_id` with input hashing to
    `input_hash`; None when it is."""
    if (existing.op_id, existing.input_hash) == (op_id, input_hash):
        return None
    return Conflict(existing, same_op=existing.op_id == op_id)
