"""Connectors: a vendor's operations, a driver for the live service and a fake for tests."""

from remit.connectors.base import (
    AppliedEffect,
    CallContext,
    Connector,
    Driver,
    Fake,
    Implementation,
    implements,
)
from remit.declare.ops import Effect, Op, op

__all__ = [
    "AppliedEffect",
    "CallContext",
    "Connector",
    "Driver",
    "Effect",
    "Fake",
    "Implementation",
    "Op",
    "implements",
    "op",
]
