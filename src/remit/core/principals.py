"""Who acts: the principals people, agents and remit itself act as.

A principal is `user:<name>`, `agent:<name>`, or one of remit's own (`remit:expiry`,
`remit:schedule`), which act on what a checked principal already set going and which no surface
accepts from outside.
"""

from __future__ import annotations

from remit.core.errors import RemitError
from remit.core.text import printable, unsafe

SYSTEM_PREFIX = "remit:"
LONGEST = 200


def check_principal(actor: str, *, where: str = "--as") -> str:
    """Refuse a principal no one could be: empty, longer than 200 characters, or holding
    control characters (which would reach log lines and terminals)."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > LONGEST or unsafe(actor):
        shown = printable(str(actor)[:LONGEST])
        raise RemitError(
            f"{where} '{shown}': a principal is 1 to {LONGEST} characters with no control "
            "characters; act as user:<name> or agent:<name>"
        )
    return actor


def check_actor(actor: str, *, where: str = "--as") -> str:
    """Refuse, on a surface people and agents use, principals no one could be
    (`check_principal`) and remit's own."""
    check_principal(actor, where=where)
    if actor.startswith(SYSTEM_PREFIX):
        raise RemitError(
            f"{where} {actor}: `{SYSTEM_PREFIX}` principals are remit's own; act as "
            "user:<name> or agent:<name>"
        )
    return actor
