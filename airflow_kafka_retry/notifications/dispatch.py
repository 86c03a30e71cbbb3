"""
Calling DLT notifiers: ``BaseNotifier`` instances (Slack, SMTP, ...) or plain callables ``f(context)``.

A notifier that raises is logged and skipped: an alert that cannot be sent never fails a run that
has already committed, and never loses a record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: The context key under which notifiers find the run summary (a JSON-able dict).
SUMMARY_KEY = "kafka_retry_summary"

Notifier = Callable[[Any], Any]


def normalize_notifiers(
    value: Notifier | Sequence[Notifier] | None, *, field: str = "on_dlt"
) -> tuple[Notifier, ...]:
    """
    ``None``, one notifier or a sequence of them, as a tuple.

    Anything not callable is refused by position.
    """
    if value is None:
        return ()
    items = [value] if callable(value) else value
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise TypeError(
            f"{field} must be a notifier (a BaseNotifier or a callable f(context)) or a list of them, "
            f"got {type(value).__name__}"
        )
    for i, item in enumerate(items):
        if not callable(item):
            raise TypeError(
                f"{field}[{i}] is a {type(item).__name__}, not a notifier: pass a BaseNotifier "
                "instance (e.g. SlackNotifier(...)) or a callable f(context)"
            )
    return tuple(items)


def notifier_name(notifier: Notifier) -> str:
    return getattr(notifier, "__qualname__", None) or type(notifier).__name__


def notify_dlt(
    notifiers: Sequence[Notifier], context: MutableMapping[str, Any], summary: Mapping[str, Any]
) -> int:
    """
    Put ``summary`` in ``context["kafka_retry_summary"]`` and call every notifier once.

    Returns how many notifiers returned without raising; the others are logged with their error.
    """
    context[SUMMARY_KEY] = dict(summary)
    succeeded = 0
    for notifier in notifiers:
        try:
            notifier(context)
        except Exception:  # a failing alert must not fail a committed run
            log.exception("DLT notifier %s raised; the run is not affected", notifier_name(notifier))
        else:
            succeeded += 1
    return succeeded
