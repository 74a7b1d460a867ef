"""Who acts: the principals people, agents and remit itself act as.

A principal is `user:<name>`, `agent:<name>`, or one of remit's own (`remit:expiry`,
`remit:schedule`), which act on what a checked principal already set going and which no surface
accepts from outside.
"""

from __future__ import annotations

from remit.core.errors import RemitError

SYSTEM_PREFIX = "remit:"


def check_actor(actor: str, *, where: str = "--as") -> str:
    """Refuse remit's own principals on a surface people and agents use."""
    if actor.startswith(SYSTEM_PREFIX):
        raise RemitError(
            f"{where} {actor}: `{SYSTEM_PREFIX}` principals are remit's own; act as "
            "user:<name> or agent:<name>"
        )
    return actor
