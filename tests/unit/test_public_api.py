"""`remit.__all__` is exactly what the README documents, and every name imports."""

from __future__ import annotations

import re
from pathlib import Path

import remit
import remit.testing

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def documented_names() -> set[str]:
    text = README.read_text()
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    section = section.split("imports these names from `remit`", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "the README's Public API section has no code block of names"
    return set(block.group(1).split())


def test_all_is_what_the_readme_documents() -> None:
    assert set(remit.__all__) == documented_names()


def test_every_exported_name_exists() -> None:
    for name in remit.__all__:
        assert hasattr(remit, name), name
    assert "Harness" in remit.testing.__all__
