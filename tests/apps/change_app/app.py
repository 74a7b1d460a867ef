from remit import App

from .connectors import forge, host
from .workflows.orders import refund, refund_order

app = App(
    name="shop",
    workflows=[refund_order],
    approvals=[refund],
    connectors=[forge.connector, host.connector],
)
