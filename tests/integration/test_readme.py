"""The README's example of testing an app runs as written (on both databases)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.e2e.cli_support import ROOT

README = ROOT / "README.md"


def _snippet(section: str) -> str:
    text = README.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None, f"the README's {section} section has no python example"
    return found.group(1)


def test_the_testing_example_runs(database_url: str, tmp_path: Path) -> None:
    code = _snippet("Testing an app")
    sqlite = 'url = f"sqlite:///{tmp_path}/remit.sqlite"'
    assert sqlite in code
    namespace: dict[str, Any] = {}
    before = Path.cwd()
    os.chdir(ROOT)  # the example names the app folder from the project's root
    try:
        exec(
            compile(code.replace(sqlite, f"url = {database_url!r}"), "README.md", "exec"), namespace
        )
        namespace["test_chase"](tmp_path)
    finally:
        os.chdir(before)
