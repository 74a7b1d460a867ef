"""The shop's git host: a forge in GitHub's shape, on its fake in tests."""

from remit import Connector, Fake, Remote
from remit.changes.forge import FakeForge, ForgeDriver
from remit.connectors.base import Driver


class NoOps(Driver):
    """The forge connector has no ops of its own: only its remote half."""


class NoFakeOps(Fake):
    """The same, on fakes."""


connector = Connector(
    "forge",
    ops=[],
    driver=NoOps,
    fake=NoFakeOps,
    remote=Remote(urls=("https://git.shop.test/",), driver=ForgeDriver, fake=FakeForge),
)
