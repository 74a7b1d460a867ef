"""When an operation call is tried again, and after how long. Pure decisions, no I/O."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff: `initial`, then times `factor`, never above `cap` seconds.

    `max_tries` counts the first call: 5 means one call and up to four retries.
    """

    max_tries: int = 5
    initial: float = 0.5
    factor: float = 2.0
    cap: float = 30.0

    def __post_init__(self) -> None:
        if self.max_tries < 1:
            raise ValueError("RetryPolicy.max_tries counts the first call: use 1 or more")
        if self.initial < 0 or self.cap < 0 or self.factor < 1:
            raise ValueError("RetryPolicy needs initial >= 0, cap >= 0 and factor >= 1")

    def delay(self, tries: int) -> float:
        """Seconds to wait after the `tries`-th failed call (1-based)."""
        try:
            grown = self.initial * self.factor ** (tries - 1)
        except OverflowError:
            return float(self.cap)
        return float(min(self.cap, grown))


DEFAULT_RETRY = RetryPolicy()


def next_delay(
    policy: RetryPolicy, *, safe_to_repeat: bool, retryable: bool, tries: int
) -> float | None:
    """Seconds to wait before calling again, or None to stop and report the failure.

    A call is repeated only when the error says a retry can help and repeating cannot double
    the effect (a read, or a write keyed by an idempotency key). A non-idempotent write is
    never repeated blindly, whatever the error says.
    """
    if not (retryable and safe_to_repeat) or tries >= policy.max_tries:
        return None
    return policy.delay(tries)
