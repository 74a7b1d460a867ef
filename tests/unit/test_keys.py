"""The one check of every key people and workflows give remit."""

from __future__ import annotations

import pytest

from remit.core.keys import key_problem


@pytest.mark.parametrize("key", ["a", "write-off", "cli:3f9a", "fix_1.2", "b64+/=", "x" * 100])
def test_printable_keys_up_to_the_bound_pass(key: str) -> None:
    assert key_problem(key, what="key", longest=100, example="k-1") is None


@pytest.mark.parametrize("key", ["", "has spaces", "tab\t", "é", "x" * 101, None, 7])
def test_anything_else_is_named_with_what_to_give(key: object) -> None:
    problem = key_problem(key, what="retry key", longest=100, example="fix-1")
    assert problem == (
        f"retry key {key!r} must be 1 to 100 printable characters with no spaces, e.g. 'fix-1'"
    )
