"""
A bounded, mergeable distribution of durations: count, sum, max and fixed histogram buckets.

Partitions (threads, processes, Spark executors) each keep one; the run merges them. Its size never
depends on how many values it saw, and it survives JSON (the Spark result document, XCom).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

#: Upper bounds (inclusive, milliseconds) of the buckets; one more bucket holds everything above.
BUCKET_BOUNDS_MS: tuple[int, ...] = (10, 100, 1_000, 10_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000)
#: How a bucket is named in metric tags and documents: its upper bound, ``inf`` for the last one (StatsD
#: names allow no ``+``).
BUCKET_LABELS: tuple[str, ...] = (*(str(b) for b in BUCKET_BOUNDS_MS), "inf")


def _empty_buckets() -> list[int]:
    return [0] * (len(BUCKET_BOUNDS_MS) + 1)


@dataclass
class Distribution:
    """Durations in milliseconds; negative values count as 0 (a clock a little behind another)."""

    count: int = 0
    sum_ms: int = 0
    max_ms: int = 0
    buckets: list[int] = field(default_factory=_empty_buckets)  # per bucket, not cumulative

    def add(self, value_ms: float) -> None:
        value = max(0, int(round(value_ms)))
        self.count += 1
        self.sum_ms += value
        self.max_ms = max(self.max_ms, value)
        self.buckets[bisect_left(BUCKET_BOUNDS_MS, value)] += 1

    def merge(self, other: Distribution) -> Distribution:
        """Add ``other`` into this one; returns self."""
        self.count += other.count
        self.sum_ms += other.sum_ms
        self.max_ms = max(self.max_ms, other.max_ms)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets)]
        return self

    def cumulative(self) -> dict[str, int]:
        """Values at or below each bound, by bucket label (``inf``: all of them), as Prometheus counts."""
        out: dict[str, int] = {}
        running = 0
        for label, n in zip(BUCKET_LABELS, self.buckets):
            running += n
            out[label] = running
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "sum_ms": self.sum_ms,
            "max_ms": self.max_ms,
            "buckets": list(self.buckets),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Distribution:
        """From :meth:`to_dict`; ``None`` (a document written before distributions existed) is empty."""
        if not data:
            return cls()
        buckets = list(data.get("buckets") or _empty_buckets())
        if len(buckets) != len(BUCKET_BOUNDS_MS) + 1:
            raise ValueError(f"a distribution needs {len(BUCKET_BOUNDS_MS) + 1} buckets, got {len(buckets)}")
        return cls(int(data["count"]), int(data["sum_ms"]), int(data["max_ms"]), [int(b) for b in buckets])

    @classmethod
    def merged(cls, parts: list[Distribution]) -> Distribution:
        total = cls()
        for part in parts:
            total.merge(part)
        return total
