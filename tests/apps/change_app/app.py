from remit import App

from .connectors import forge, host
from .workflows.orders import refund, refund_order

app = App(
    name="shop",
    repo="https://git.shop.test/shop/ops.git",
    workflows=[refund_order],
    approvals=[refund],
    connectors=[forge.connector, host.connector],
)
