"""
Back-off policies: (number of retries, back-off) -> the list of delays.

Like Spring's BackOffValuesGenerator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BackOffKind = Literal["fixed", "exponential", "custom"]

DEFAULT_FIXED_DELAY_MS = 1_000  # Spring's FixedBackOff default interval
DEFAULT_MULTIPLIER = 2.0
DEFAULT_MAX_DELAY_MS = 30_000  # Spring's ExponentialBackOff default max interval


@dataclass(frozen=True)
class BackOff:
    """
    How long a failed record waits before each retry.

    ``fixed``: every retry waits ``delay_ms``. ``exponential``: retry *i* (from 0) waits
    ``initial_ms * multiplier**i`` capped at ``max_ms``, truncated to whole milliseconds at each
    step as Spring does (1000 x1.5: 1000, 1500, 2250, 3375, 5062, 7593, 11389). ``custom``: the
    listed delays, the last one repeated when there are more retries than entries.
    """

    kind: BackOffKind = "fixed"
    delay_ms: int = DEFAULT_FIXED_DELAY_MS
    initial_ms: int = DEFAULT_FIXED_DELAY_MS
    multiplier: float = DEFAULT_MULTIPLIER
    max_ms: int = DEFAULT_MAX_DELAY_MS
    delays: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential", "custom"):
            raise ValueError(f"unknown back-off kind {self.kind!r}; use fixed, exponential or custom")
        if self.kind == "exponential":
            if self.multiplier < 1.0:
                raise ValueError(f"multiplier must be >= 1.0, got {self.multiplier}")
            if self.max_ms < self.initial_ms:
                raise ValueError(f"max ({self.max_ms} ms) is smaller than initial ({self.initial_ms} ms)")
        if self.kind == "custom" and not self.delays:
            raise ValueError("a custom back-off needs at least one delay in 'delays'")

    def delays_for(self, retries: int) -> list[int]:
        """Return the delay in milliseconds before each of ``retries`` retries, in order."""
        if retries < 0:
            raise ValueError(f"retries cannot be negative, got {retries}")
        if self.kind == "fixed":
            return [self.delay_ms] * retries
        if self.kind == "custom":
            return [self.delays[min(i, len(self.delays) - 1)] for i in range(retries)]
        # As Spring's ExponentialBackOffPolicy: the interval is whole milliseconds, truncated after
        # every multiplication, and stops growing once it passes the cap.
        values: list[int] = []
        interval = self.initial_ms
        for _ in range(retries):
            if interval > self.max_ms:
                values.append(self.max_ms)
            else:
                values.append(interval)
                interval = int(interval * self.multiplier)
        return values
