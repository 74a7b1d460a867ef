"""RetryPolicy's capped exponential backoff and next_delay's decision to call again or stop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remit.core.backoff import DEFAULT_RETRY, RetryPolicy, next_delay


def test_delay_doubles_from_initial_then_stops_at_cap() -> None:
    policy = RetryPolicy(max_tries=10, initial=0.5, factor=2.0, cap=3.0)

    delays = [policy.delay(tries) for tries in range(1, 7)]

    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_delay_with_factor_one_is_constant() -> None:
    policy = RetryPolicy(initial=1.5, factor=1.0, cap=10.0)

    assert [policy.delay(tries) for tries in (1, 2, 5, 20)] == [1.5, 1.5, 1.5, 1.5]


def test_delay_is_the_cap_when_initial_exceeds_it() -> None:
    policy = RetryPolicy(initial=50.0, cap=30.0)

    assert policy.delay(1) == 30.0


def test_delay_is_a_float() -> None:
    policy = RetryPolicy(initial=1, factor=2, cap=100)

    assert isinstance(policy.delay(3), float)
    assert policy.delay(3) == 4.0


def test_default_policy() -> None:
    assert RetryPolicy(max_tries=5, initial=0.5, factor=2.0, cap=30.0) == DEFAULT_RETRY
    assert [DEFAULT_RETRY.delay(tries) for tries in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]


def test_delay_far_past_the_cap_is_the_cap() -> None:
    # A policy with many tries (here 2000) must still wait `cap` seconds, not overflow while
    # computing factor ** (tries - 1) before capping it.
    policy = RetryPolicy(max_tries=5000, initial=0.5, factor=2.0, cap=30.0)

    assert policy.delay(2000) == 30.0
    assert next_delay(policy, safe_to_repeat=True, retryable=True, tries=2000) == 30.0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_tries": 0}, "max_tries"),
        ({"initial": -0.1}, "initial >= 0"),
        ({"cap": -1.0}, "cap >= 0"),
        ({"factor": 0.5}, "factor >= 1"),
    ],
)
def test_policy_refuses_unusable_values(kwargs: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match="RetryPolicy") as raised:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]

    assert words in str(raised.value)


def test_next_delay_retries_a_retryable_read_with_the_policy_delay() -> None:
    policy = RetryPolicy(max_tries=4, initial=1.0, factor=3.0, cap=100.0)

    delays = [
        next_delay(policy, safe_to_repeat=True, retryable=True, tries=tries) for tries in (1, 2, 3)
    ]

    assert delays == [1.0, 3.0, 9.0]


def test_next_delay_never_repeats_a_non_idempotent_write() -> None:
    policy = RetryPolicy(max_tries=100)

    for tries in range(1, 10):
        assert next_delay(policy, safe_to_repeat=False, retryable=True, tries=tries) is None


def test_next_delay_stops_when_the_error_is_not_retryable() -> None:
    policy = RetryPolicy(max_tries=100)

    assert next_delay(policy, safe_to_repeat=True, retryable=False, tries=1) is None
    assert next_delay(policy, safe_to_repeat=False, retryable=False, tries=1) is None


def test_next_delay_stops_at_max_tries_counting_the_first_call() -> None:
    policy = RetryPolicy(max_tries=3, initial=1.0, factor=2.0, cap=10.0)

    assert next_delay(policy, safe_to_repeat=True, retryable=True, tries=2) == 2.0
    assert next_delay(policy, safe_to_repeat=True, retryable=True, tries=3) is None
    assert next_delay(policy, safe_to_repeat=True, retryable=True, tries=4) is None


def test_max_tries_one_means_no_retry() -> None:
    policy = RetryPolicy(max_tries=1)

    assert next_delay(policy, safe_to_repeat=True, retryable=True, tries=1) is None


def test_a_retry_loop_makes_max_tries_calls_in_all() -> None:
    policy = RetryPolicy(max_tries=5, initial=0.25, factor=2.0, cap=1.0)
    calls = 0
    waited: list[float] = []
    while True:
        calls += 1  # the call fails with a retryable error every time
        delay = next_delay(policy, safe_to_repeat=True, retryable=True, tries=calls)
        if delay is None:
            break
        waited.append(delay)

    assert calls == 5
    assert waited == [0.25, 0.5, 1.0, 1.0]


policies = st.builds(
    RetryPolicy,
    max_tries=st.integers(min_value=1, max_value=1000),
    initial=st.floats(min_value=0.0, max_value=120.0, allow_nan=False),
    factor=st.floats(min_value=1.0, max_value=10.0, allow_nan=False),
    cap=st.floats(min_value=0.0, max_value=3600.0, allow_nan=False),
)


@settings(database=None, max_examples=300)
@given(policy=policies, tries=st.integers(min_value=1, max_value=300))
def test_delay_never_exceeds_cap_and_never_decreases(policy: RetryPolicy, tries: int) -> None:
    now = policy.delay(tries)
    after = policy.delay(tries + 1)

    assert 0.0 <= now <= policy.cap
    assert after <= policy.cap
    assert now <= after


@settings(database=None, max_examples=300)
@given(
    policy=policies,
    tries=st.integers(min_value=1, max_value=300),
    safe_to_repeat=st.booleans(),
    retryable=st.booleans(),
)
def test_next_delay_is_none_or_a_capped_delay(
    policy: RetryPolicy, tries: int, safe_to_repeat: bool, retryable: bool
) -> None:
    delay = next_delay(policy, safe_to_repeat=safe_to_repeat, retryable=retryable, tries=tries)

    if safe_to_repeat and retryable and tries < policy.max_tries:
        assert delay == policy.delay(tries)
        assert delay <= policy.cap
    else:
        assert delay is None
