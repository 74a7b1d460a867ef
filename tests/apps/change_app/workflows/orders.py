from pydantic import BaseModel

from remit import ApprovalType, Context, workflow


class Order(BaseModel):
    order_id: str


class Refund(BaseModel):
    order_id: str


refund = ApprovalType("refund", draft=Refund)


@workflow(name="refund", input=Order)
def refund_order(ctx: Context, input: Order) -> dict[str, str]:
    ctx.step("look up", lambda: input.order_id)
    decision = ctx.approval(
        "ok", type="refund", title="refund", draft=Refund(order_id=input.order_id)
    )
    return {"order_id": input.order_id, "decision": decision.status}
