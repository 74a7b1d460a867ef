"""The ar app's `chase`: it notes who it chased in its own `notes` and tells them."""

from __future__ import annotations

from pydantic import BaseModel

from remit import Context, collection, workflow

from ....connectors.notify import send


class Chased(BaseModel):
    who: str
    times: int = 0
    by_app: str = "ar"


class ChaseInput(BaseModel):
    who: str


notes = collection("notes", model=Chased, key="who")


@workflow(name="chase", input=ChaseInput, uses=[notes.get, notes.put, send])
def chase(ctx: Context, input: ChaseInput) -> dict[str, object]:
    known = ctx.data.ar.notes.get(who=input.who).record or Chased(who=input.who)
    saved = ctx.call(notes.put, known.model_copy(update={"times": known.times + 1}))
    sent = ctx.call(send, to=input.who, text="ar chased you")
    return {"app": "ar", "times": saved.times, "message_id": sent.message_id}
