"""pytest collects scenarios: each scenario of a `scenarios/*.feature` file (a repo's, or an
app's in `apps/<app>/scenarios/`) is one test, named by its feature and scenario.

Registered as remit's `pytest11` plugin, so `pytest` finds it where remit is installed; load it
by hand with `pytest -p remit.scenarios.pytest_plugin`. It collects a feature file only when the
folder it would load the app from is a remit repo or app (`is_remit_folder`), so another
project's `tests/scenarios/*.feature` (pytest-bdd's, behave's) is left alone. `--remit-database-url` (default
`REMIT_SCENARIO_DATABASE_URL`) runs each scenario on a fresh database on a Postgres server
instead of a SQLite file. A failing scenario's report is remit's (`report.py`). In the processes
a change's checks start, a scenario that opens a change is skipped (`changes.skipped_here`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from remit.scenarios import features
from remit.scenarios.features import APPS_FOLDER, Scenario

if TYPE_CHECKING:
    from remit.app import App

_APPS = pytest.StashKey[dict[Path, "App"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("remit", "remit scenarios")
    group.addoption(
        "--remit-database-url",
        default=None,
        help="Run each scenario on a fresh database on this Postgres server (default: "
        "REMIT_SCENARIO_DATABASE_URL, else a SQLite file).",
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    # A `scenarios/*.feature` of a project that is no remit app (pytest-bdd's, behave's) is
    # left to its own tools: the plugin is loaded wherever remit is installed.
    if features.is_scenario_file(file_path) and is_remit_folder(app_folder_of(file_path)[0]):
        return FeatureFile.from_parent(parent, path=file_path)
    return None


def is_remit_folder(folder: Path) -> bool:
    """Whether `folder` holds a remit repo or app, as `load_app` finds one: an `app.py`, or
    workflows in `workflows/*.py` or `apps/<app>/workflows/*.py`, or connectors in
    `connectors/*.py`."""
    return (folder / "app.py").is_file() or any(
        next(folder.glob(pattern), None) is not None
        for pattern in ("workflows/*.py", f"{APPS_FOLDER}/*/workflows/*.py", "connectors/*.py")
    )


def app_folder_of(path: Path) -> tuple[Path, str | None]:
    """The folder to load the app of feature file `path` from, and the app's name in a repo
    (`apps/<app>/`, with its `workflows/`): the repo's root, which loads every app in it
    (`load_app`). An app with an `app.py` of its own is its own folder, wherever it is."""
    folder = path.resolve().parent.parent
    app = features.app_name_of(path)
    return (folder, None) if app is None else (folder.parent.parent, app)


class FeatureFile(pytest.File):
    """One feature file: a test per scenario."""

    def collect(self) -> Iterator[pytest.Item]:
        from remit.scenarios.changes import skipped_here

        seen: dict[str, int] = {}
        for scenario in features.read(self.path):
            name = scenario.title
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name} [{seen[name]}]"
            item = ScenarioItem.from_parent(self, name=name, scenario=scenario)
            skipped = skipped_here(scenario)
            if skipped is not None:
                item.add_marker(pytest.mark.skip(reason=skipped))
            yield item

    def app(self) -> tuple[App, str | None]:
        from remit.app import load_app

        folder, name = app_folder_of(self.path)
        apps = self.config.stash.setdefault(_APPS, {})
        if folder not in apps:
            apps[folder] = load_app(folder)
        return apps[folder], name


class ScenarioItem(pytest.Item):
    """One scenario, run on the app's fakes, a fresh database and a manual clock."""

    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        for tag in scenario.tags:  # `-k wip` selects the scenarios tagged @wip
            self.keywords[tag.lstrip("@")] = True

    def runtest(self) -> None:
        from remit.scenarios.databases import scenario_database
        from remit.scenarios.runner import run_scenario

        assert isinstance(self.parent, FeatureFile)
        app, name = self.parent.app()
        with scenario_database(self.config.getoption("remit_database_url")) as url:
            result = run_scenario(app, self.scenario, database_url=url, app_name=name)
        self.user_properties.append(("scenario_seconds", round(result.took, 3)))

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | Any:
        from remit.core.errors import RemitError
        from remit.scenarios.runner import ScenarioFailed

        if isinstance(excinfo.value, ScenarioFailed):
            return excinfo.value.report
        if isinstance(excinfo.value, RemitError):
            return f"{self.scenario.title} ({self.path}:{self.scenario.line}): {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.scenario.line - 1, self.scenario.title
