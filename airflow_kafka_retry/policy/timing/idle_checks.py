"""
When a watched lane next reads its group's committed offsets: often while it is busy, rarely while idle.

An event trigger's lane (a tier, the main topic or the DLTs, ``triggers/``) reads its group's committed
offsets and its partitions (two broker requests and a metadata request) at a cadence that depends on what
it sees:

- **busy** (a fired wave not taken yet, or a head due, or due within ``busy_ms``): every ``busy_ms``
  (``commit_check``), to see its run commit;
- **a head due later**: once right before it falls due (``busy_ms`` before), so the check that sees a run
  take it (or a hand reset move it) comes as it would have at the busy cadence, and never later than the
  idle interval;
- **idle** (nothing pending): every idle interval, which starts at ``idle_check`` and doubles after each
  check that saw nothing change, up to ``idle_check_max``, back to ``idle_check`` at any change (a committed
  offset moved, a partition added, a head learnt or gone, a wave fired or taken).

A new record on an idle lane is not found by these checks: the watch's fetch delivers it (its partitions
at their end are never paused), and the trigger looks at what the watch fetched every ``poll_interval``,
whatever the cadence. What only an idle check finds -- a group's offsets reset by hand, partitions added to
a topic -- is found within ``idle_check_max`` instead of ``idle_check``. Pure: no I/O, no clock.
"""

from __future__ import annotations


def idle_interval_ms(previous_ms: int, *, changed: bool, base_ms: int, max_ms: int) -> int:
    """
    The idle interval after a check: ``base_ms`` after a change (or at first), else doubled, up to ``max_ms``.

    ``max_ms`` below ``base_ms`` means no back-off: every idle check is ``base_ms`` apart.
    """
    if changed or previous_ms < base_ms:
        return base_ms
    return min(previous_ms * 2, max(max_ms, base_ms))


def check_at_ms(
    now_ms: int, *, busy_ms: int, idle_ms: int, first_fire_ms: int | None, wave_pending: bool
) -> int:
    """
    When the lane next reads its group's committed offsets (epoch ms).

    :param busy_ms: the busy cadence (``commit_check``).
    :param idle_ms: the lane's idle interval (:func:`idle_interval_ms`).
    :param first_fire_ms: the earliest time one of its heads may fire (its due time less ``fire_ahead``;
        a head without due time: now); None: no head.
    :param wave_pending: a wave it fired is not taken yet.
    """
    if wave_pending:
        return now_ms + busy_ms
    idle_at = now_ms + idle_ms
    if first_fire_ms is None:
        return idle_at
    return min(idle_at, max(now_ms + busy_ms, first_fire_ms - busy_ms))
