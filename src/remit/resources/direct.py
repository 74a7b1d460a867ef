"""Calling resource ops directly, outside any run: what `remit plan`, `remit import` and
`remit resources` read the vendors with. Only reads are made so (plan, read, import); a change
is always a step of the built-in `apply`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from remit.connectors.base import CallContext, Implementation
from remit.core.errors import AppError
from remit.declare.ops import Op
from remit.resources.planner import Caller


def direct_caller(
    implementations: Mapping[str, Implementation],
    environ: Mapping[str, str],
    *,
    actor: str,
    timeout: float = 30.0,
) -> Caller:
    """A caller that makes each read on the vendor's implementation now, unrecorded."""
    run_id = "direct-" + uuid.uuid4().hex[:12]

    def call(op: Op[Any, Any], payload: dict[str, Any], key: str) -> BaseModel:
        if op.effect != "read":
            raise AppError(f"`{op.id}` changes the vendor: only `remit apply` makes it")
        context = CallContext(
            op=op,
            idempotency_key=f"{run_id}:{key}",
            run_id=run_id,
            attempt=1,
            actor=actor,
            environ=environ,
            timeout=op.timeout or timeout,
        )
        answer: BaseModel = implementations[op.vendor].invoke(
            op, op.input.model_validate(payload), context
        )
        return answer

    return call
