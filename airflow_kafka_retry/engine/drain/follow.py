"""
Following a tier: passes of one run while records keep falling due soon, instead of a new run per wave.

A drain stops at the first record that is not due yet. When that record is due within ``follow_ms``,
starting a new Airflow run for it (the trigger fires, the scheduler creates a run, a task process
starts) costs more than waiting: the run waits until it is due and drains again, a new pass with
its own clients from the committed offsets, exactly as a new run would. It ends when nothing falls
due that soon, a pass fails or stops, or ``should_stop``/``deadline_ms`` says so. No Airflow import.

The lead. A pass costs time before its first record reaches the handler (clients, committed offsets, the
first fetch: 0.1-0.2 s on a quiet machine). So a wait for a due time ``D`` (the operator's wait for its wave,
and the wait here for the next record) ends ``PASS_LEAD_MS`` before ``D``, and the pass's cutoff is
``D + PASS_LEAD_MS``: records due within the lead after ``D`` (the rest of a burst) are in the same pass.
The reader (``due_records.py``) holds a record that is in the pass but not yet due until it is, so none
reaches the handler early; its hold is bounded by the lead, whatever a record's header says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary

_STEP_S = 0.2  # how often a wait looks at should_stop

#: A wait for a due time ends this long before it, and the pass then covers this long after it.
#: Measured (``bench/pass_lead.py``, two worker processes): with no lead a wave's records reached the handler
#: 0.08-0.41 s after their due time (p50 0.24-0.30 s); with a lead of 100 ms some still came up to 0.1 s
#: late, with 200 or 400 ms none more than 15 ms (p50 6 ms). 400 leaves room for a loaded machine.
PASS_LEAD_MS = 400
#: The longest a pass's reader holds a record until it is due: from the wake, the lead before and after.
MAX_HOLD_MS = 2 * PASS_LEAD_MS


def wait_for_pass(
    due_ms: int,
    *,
    should_stop: Callable[[], str | None] = lambda: None,
    lead_ms: int = PASS_LEAD_MS,
    clock: Callable[[], int] = wall_clock_ms,
    sleep: Callable[[float], object] = time.sleep,
) -> int:
    """
    Wait until ``lead_ms`` before ``due_ms`` (or a stop); return the cutoff of the pass that starts then.

    The cutoff is ``due_ms + lead_ms``, or now if that has passed (a late start drains what is due by now),
    or if the wait ended before the lead (a stop): a cutoff ahead of now only when the hold covers it.
    """
    while (remaining := due_ms - lead_ms - clock()) > 0 and should_stop() is None:
        sleep(min(remaining / 1000, _STEP_S))
    now = clock()
    return max(due_ms + lead_ms, now) if now >= due_ms - lead_ms else now


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
    sleep: Callable[[float], object] = time.sleep,
    lead_ms: int = PASS_LEAD_MS,
) -> RunSummary:
    """
    ``drain(cutoff_ms)``, then more passes while the next record is due within ``follow_ms``.

    :param drain: one pass: drains what is due by the given cutoff and returns its summary.
    :param follow_ms: None or 0: one pass.
    :param deadline_ms: no pass starts after this (the run's window or ``max_run``).
    :param lead_ms: a later pass starts this long before its first record is due (see the module).
    """
    summary = drain(cutoff_ms)
    while follow_ms and summary.ok and summary.stopped is None:
        due = next_due_ms(summary)
        if due is None or due - clock() > follow_ms or (deadline_ms is not None and due >= deadline_ms):
            break
        cutoff = wait_for_pass(due, should_stop=should_stop, lead_ms=lead_ms, clock=clock, sleep=sleep)
        if (reason := should_stop()) is not None:
            summary.stopped = reason  # everything drained so far is committed
            break
        summary.absorb(drain(cutoff))
    return summary
