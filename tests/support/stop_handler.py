"""Ledger handlers that report progress, so a test can close a window or request a stop mid-run.

``CLOCK`` is the time (epoch ms) the engine sees when the test passes ``clock=now_ms``.
:func:`advancing` handles a batch as :func:`tests.support.ledger_handler.indexed` does, then sets
the clock to ``start + STEP_MS * (highest offset handed to it + 1)``: the time follows how far the
run has read, however many calls isolating failures took. :func:`counting` records the
(partition, offset) of every record it was handed, in ``SEEN``.
"""

from __future__ import annotations

from tests.support import ledger_handler

START = [0]
CLOCK = [0]
STEP_MS = [0]
SEEN: set[tuple[int, int]] = set()


def reset(start_ms: int, step_ms: int) -> None:
    START[0], CLOCK[0], STEP_MS[0] = start_ms, start_ms, step_ms
    SEEN.clear()


def now_ms() -> int:
    return CLOCK[0]


def advancing(records) -> None:
    try:
        ledger_handler.indexed(records)
    finally:
        furthest = max(r.offset for r in records)
        CLOCK[0] = max(CLOCK[0], START[0] + STEP_MS[0] * (furthest + 1))


def counting(records) -> None:
    SEEN.update((r.partition, r.offset) for r in records)
    ledger_handler.indexed(records)
