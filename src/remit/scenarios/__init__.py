"""Scenarios: behaviour in plain sentences (`scenarios/*.feature`), run on an app's fakes with
time under control, by `remit test` (pytest collects them, see `pytest_plugin.py`).

`run_scenario` runs one; `seed` runs the connector givens of feature files' backgrounds on an
instance, which is how a demo starts from the records its scenarios start from.

The names are imported on first use, so that pytest loading the plugin costs little.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remit.scenarios.databases import scenario_database
    from remit.scenarios.features import Scenario, Step, feature_files, read
    from remit.scenarios.runner import ScenarioFailed, ScenarioResult, run_scenario, seed

_HOMES = {
    "remit.scenarios.databases": ("scenario_database",),
    "remit.scenarios.features": ("Scenario", "Step", "feature_files", "read"),
    "remit.scenarios.runner": ("ScenarioFailed", "ScenarioResult", "run_scenario", "seed"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "Scenario",
    "ScenarioFailed",
    "ScenarioResult",
    "Step",
    "feature_files",
    "read",
    "run_scenario",
    "scenario_database",
    "seed",
]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _HOME_OF.get(name)
        if module is None:
            raise AttributeError(f"module 'remit.scenarios' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
