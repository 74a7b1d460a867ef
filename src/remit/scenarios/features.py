"""Feature files: where they are found, and the scenarios in them as steps to run.

A repo's own scenarios are in `scenarios/*.feature` at its root; an app's are in
`apps/<app>/scenarios/*.feature`. Each scenario (and each row of a scenario outline's examples)
becomes one `Scenario`, its background's steps first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gherkin.errors import CompositeParserException, ParserException
from gherkin.parser import Parser
from gherkin.pickles.compiler import Compiler

from remit.core.errors import AppError

FOLDER = "scenarios"
APPS_FOLDER = "apps"
SUFFIX = ".feature"


@dataclass(frozen=True)
class Step:
    """One line of a scenario: its keyword as written, its text, and its table or docstring."""

    keyword: str
    text: str
    line: int
    table: tuple[tuple[str, ...], ...] | None = None
    doc: str | None = None
    # Said in a background: what `seed` runs.
    background: bool = False

    @property
    def sentence(self) -> str:
        return f"{self.keyword.strip()} {self.text}"


@dataclass(frozen=True)
class Scenario:
    """One scenario of a feature file, ready to run against an app."""

    path: Path
    feature: str
    name: str
    line: int
    steps: tuple[Step, ...]
    tags: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return f"{self.feature}: {self.name}"

    def where(self, step: Step) -> str:
        return f"{self.path}:{step.line}"


def feature_files(root: Path | str) -> list[Path]:
    """The feature files under `root`: `scenarios/*.feature` and `apps/*/scenarios/*.feature`
    (or, when `root` is itself a `scenarios` folder or a feature file, those)."""
    root = Path(root)
    if root.is_file():
        return [root] if root.suffix == SUFFIX else []
    if root.name == FOLDER:
        return sorted(root.glob(f"*{SUFFIX}"))
    return sorted(
        [
            *(root / FOLDER).glob(f"*{SUFFIX}"),
            *(root / APPS_FOLDER).glob(f"*/{FOLDER}/*{SUFFIX}"),
        ]
    )


def is_scenario_file(path: Path) -> bool:
    """Whether `path` is a feature file in a `scenarios/` folder (a repo's or an app's)."""
    return path.suffix == SUFFIX and path.parent.name == FOLDER


def app_name_of(path: Path) -> str | None:
    """The app a feature file in `apps/<app>/scenarios/` belongs to; None for a repo's own, or
    for one of an app that is a folder of its own (with its `app.py`) that sits in a folder
    named `apps`."""
    folder = path.resolve().parent.parent
    in_repo = (folder / "workflows").is_dir() and not (folder / "app.py").exists()
    if folder.parent.name == APPS_FOLDER and in_repo:
        return folder.name
    return None


def read(path: Path | str) -> list[Scenario]:
    """The scenarios of one feature file; `AppError` naming the line that does not parse."""
    path = Path(path)
    try:
        document: Any = Parser().parse(path.read_text())
    except (ParserException, CompositeParserException) as error:
        raise AppError(f"{path} is not a feature file remit can read: {error}") from None
    feature = document.get("feature")
    if feature is None:
        return []
    steps = dict(_steps(feature))
    scenarios = []
    located: Any = {**document, "uri": str(path)}
    for compiled in Compiler().compile(located):  # gherkin's "pickles": one per scenario
        scenarios.append(
            Scenario(
                path=path,
                feature=feature["name"],
                name=compiled["name"],
                line=compiled["location"]["line"],
                steps=tuple(_step(raw, steps) for raw in compiled["steps"]),
                tags=tuple(tag["name"] for tag in compiled["tags"]),
            )
        )
    return scenarios


def _step(raw: Any, steps: dict[str, tuple[dict[str, Any], bool]]) -> Step:
    ast, background = steps[raw["astNodeIds"][0]]
    argument = raw.get("argument", {})
    table = argument.get("dataTable")
    doc = argument.get("docString")
    return Step(
        keyword=ast["keyword"],
        text=raw["text"],
        line=ast["location"]["line"],
        table=None
        if table is None
        else tuple(tuple(cell["value"] for cell in row["cells"]) for row in table["rows"]),
        doc=None if doc is None else doc["content"],
        background=background,
    )


def _steps(node: dict[str, Any]) -> Iterator[tuple[str, tuple[dict[str, Any], bool]]]:
    """Every step of the feature by its id, and whether a background says it."""
    for child in node.get("children", []):
        if "background" in child:
            for step in child["background"]["steps"]:
                yield step["id"], (step, True)
        if "scenario" in child:
            for step in child["scenario"]["steps"]:
                yield step["id"], (step, False)
        if "rule" in child:
            yield from _steps(child["rule"])
