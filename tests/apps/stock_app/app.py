"""An app for the crash tests of `apply`: many declared resources of the test vendor `store`
(see tests/resource_support.py), so an apply is long enough to be killed in the middle.

The declarations are in `resources/`; copy the folder before applying, as apply writes
`remit.lock` beside this file.
"""

from __future__ import annotations

from tests.resource_support import store

from remit import App

app = App(name="stock", workflows=[], connectors=[store])
