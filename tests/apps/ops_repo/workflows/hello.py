"""The repo's own workflow, at its root: its name stays `hello`."""

from __future__ import annotations

from pydantic import BaseModel

from remit import Context, workflow


class Hello(BaseModel):
    who: str = "world"


@workflow(name="hello", input=Hello)
def hello(ctx: Context, input: Hello) -> str:
    return ctx.step("greet", lambda: f"hello {input.who}", output=str)
