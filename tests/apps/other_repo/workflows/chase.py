"""This repo's `chase`: a root workflow, so its name is plain `chase`."""

from __future__ import annotations

from pydantic import BaseModel

from remit import Context, workflow


class ChaseInput(BaseModel):
    who: str


@workflow(name="chase", input=ChaseInput)
def chase(ctx: Context, input: ChaseInput) -> str:
    return ctx.step("chase", lambda: f"other-repo chased {input.who}", output=str)
