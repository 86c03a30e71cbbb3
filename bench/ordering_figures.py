"""
The figures of ``python -m bench.ordering``, from the ledger file alone (``testkit/ordering_ledger.py``).

* **lateness** of a record: its first handling (attempt 1, the main drain) minus when it was produced;
* **held wait** of a record: its first handling minus the end of the last earlier record of its key that was
  still in flight when it was produced (its *head*); a head ends at its success, or, when it never succeeds,
  at its last failure (its dead-lettering commits right after). Under ``ordering: none`` the same figure is
  mostly negative: the record ran before its head ended (``ran_before_head``);
* **throughput** of the main drain on a set of keys: its records handled by the drain, over the time from
  the drain's start to the last of them.

Pure: no broker, no engine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testkit.ordering_ledger import Entry

Record = tuple[str, int]


def percentiles(values: Sequence[float]) -> dict[str, Any]:
    """Count, p50, p95, p99 and max of ``values`` (seconds, 3 decimals); None figures when empty."""
    if not values:
        return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "count": len(ordered),
        "p50": at(0.5),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 3),
    }


@dataclass
class Fate:
    """What the ledger file says of one record: its first handling, its first failure, its end (epoch ms)."""

    first_ms: int | None = None
    first_failed: bool = False
    end_ms: int | None = None  # its success, or its last failure


def fates(entries: Iterable[Entry]) -> dict[Record, Fate]:
    out: dict[Record, Fate] = defaultdict(Fate)
    for e in entries:
        fate = out[(e.key, e.seq)]
        if e.attempt == 1 and fate.first_ms is None:
            fate.first_ms, fate.first_failed = e.at_ms, not e.ok
        fate.end_ms = e.at_ms if fate.end_ms is None else max(fate.end_ms, e.at_ms)  # failures come first
    return dict(out)


def lateness_s(
    records: Iterable[Record], produced: Mapping[Record, int], fate: Mapping[Record, Fate]
) -> list[float]:
    out = []
    for r in records:
        first = fate.get(r, Fate()).first_ms
        if first is not None and r in produced:
            out.append((first - produced[r]) / 1000)
    return out


def held_waits(
    records: Sequence[Record], produced: Mapping[Record, int], fate: Mapping[Record, Fate]
) -> tuple[list[float], int]:
    """
    The held waits (s) of ``records`` whose head was in flight when they were produced; how many ran before.

    ``records`` in produce order; *ran before*: handled before their head ended (out of order).
    """
    heads: dict[str, list[Record]] = defaultdict(list)  # per key, its earlier records that failed first
    waits, before = [], 0
    for r in records:
        key = r[0]
        mine, made = fate.get(r, Fate()), produced.get(r)
        if made is not None and mine.first_ms is not None:
            ends = [fate[h].end_ms for h in heads[key] if (fate[h].end_ms or 0) > made]
            if ends:
                wait = mine.first_ms - max(e for e in ends if e is not None)
                if wait < 0:
                    before += 1
                else:
                    waits.append(wait / 1000)
        if mine.first_failed:
            heads[key].append(r)
    return waits, before


def drain_rate(
    records: Collection[Record], fate: Mapping[Record, Fate], started_ms: int, ended_ms: int
) -> dict[str, Any]:
    """Of ``records``, those first handled by a drain run from ``started_ms`` to ``ended_ms``, per second."""
    times = [f.first_ms for r in records if (f := fate.get(r)) and f.first_ms and f.first_ms <= ended_ms]
    if not times:
        return {"records": 0, "seconds": None, "records_per_s": None}
    seconds = max(0.001, (max(times) - started_ms) / 1000)
    return {"records": len(times), "seconds": round(seconds, 3), "records_per_s": round(len(times) / seconds)}
