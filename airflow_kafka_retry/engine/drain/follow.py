"""
Following a tier: passes of one run while records keep falling due soon, instead of a new run per wave.

A drain stops at the first record that is not due yet. When that record is due within ``follow_ms``,
starting a new Airflow run for it (the trigger fires, the scheduler creates a run, a task process
starts) costs more than waiting: the run waits until it is due and drains again, a new pass with
its own clients from the committed offsets, exactly as a new run would. It ends when nothing falls
due that soon, a pass fails or stops, or ``should_stop``/``deadline_ms`` says so. No Airflow import.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary

_STEP_S = 0.2  # how often a wait looks at should_stop


def next_due_ms(summary: RunSummary) -> int | None:
    """When the first record a pass left (because it was not due yet) is due, over all partitions."""
    dues = [
        p.next_due_ms for p in summary.partitions if p.stop_reason == "not_due" and p.next_due_ms is not None
    ]
    return min(dues) if dues else None


def drain_following(
    drain: Callable[[int], RunSummary],
    *,
    cutoff_ms: int,
    follow_ms: int | None,
    should_stop: Callable[[], str | None] = lambda: None,
    deadline_ms: int | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> RunSummary:
    """
    ``drain(cutoff_ms)``, then more passes while the next record is due within ``follow_ms``.

    :param drain: one pass: drains what is due by the given cutoff and returns its summary.
    :param follow_ms: None or 0: one pass.
    :param deadline_ms: no pass starts after this (the run's window or ``max_run``).
    """
    summary = drain(cutoff_ms)
    while follow_ms and summary.ok and summary.stopped is None:
        due = next_due_ms(summary)
        if due is None or due - clock() > follow_ms or (deadline_ms is not None and due >= deadline_ms):
            break
        while (remaining := due - clock()) > 0 and should_stop() is None:
            time.sleep(min(remaining / 1000, _STEP_S))
        if (reason := should_stop()) is not None:
            summary.stopped = reason  # everything drained so far is committed
            break
        summary.absorb(drain(max(due, clock())))
    return summary
