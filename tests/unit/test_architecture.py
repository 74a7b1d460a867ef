"""docs/architecture.md stays true: every module and object it names exists, and its diagram
of the layers is the one `lint-imports` holds the code to."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
SRC = ROOT / "src" / "remit"


def test_every_file_the_page_names_exists() -> None:
    named = set(re.findall(r"`([a-z_/]+\.py)`", PAGE))
    assert len(named) > 20  # the page's references were found
    missing = sorted(
        path
        for path in named
        if not (ROOT / path if path.startswith("tests/") else SRC / path).is_file()
    )
    assert missing == [], f"docs/architecture.md names files src/remit does not have: {missing}"


def test_every_object_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:[a-z_]+\.)+[A-Z][A-Za-z]+)`", PAGE))
    assert named  # e.g. core.runs.Startable
    for dotted in sorted(named):
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(f"remit.{module}"), name), dotted


def test_the_diagram_is_the_layers_lint_imports_holds() -> None:
    diagram = PAGE.split("```")[1]
    drawn = [line.split("  ")[0].strip() for line in diagram.strip().splitlines()]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [
        contract["layers"]
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["type"] == "layers"
    ]
    assert drawn == [layer.replace("remit.", "") for layer in layers]
    for layer in drawn:
        for package in layer.split(" | "):
            assert (SRC / package).is_dir() or (SRC / f"{package}.py").is_file(), package
