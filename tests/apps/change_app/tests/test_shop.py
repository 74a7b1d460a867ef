"""The shop's own test, which `remit test` runs in a change's checks."""

from pathlib import Path

from remit.app import load_app


def test_the_shop_loads() -> None:
    app = load_app(Path(__file__).parent.parent)
    assert "refund" in app.workflows
