"""
A topology's ``ordering`` and ``release_on`` (``docs/ordering.md``), and their checks against the rest of it.

``ordering: key`` holds a key's later records behind its record in flight; the hold topic and the compacted
state topic are named after the main topic. Each check returns the problems it found, each naming its field.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.errors import TopologyError
    from airflow_kafka_retry.policy.ordering.book import ReleaseOn
    from airflow_kafka_retry.policy.topology.shape import TopologyShape

Ordering = Literal["none", "key"]
ORDERINGS: tuple[Ordering, ...] = ("none", "key")
RELEASE_ON: tuple[ReleaseOn, ...] = ("dlt", "replay")
#: ``<topic>-hold``: held copies and the tiers' marks; ``<topic>-order-state``: the blocked keys (compacted).
HOLD_SUFFIX = "-hold"
ORDER_STATE_SUFFIX = "-order-state"


def check_ordering(t: TopologyShape) -> list[TopologyError]:
    """``ordering`` and ``release_on`` are known values, and fit the topology's other fields."""
    errors: list[TopologyError] = []
    if t.ordering not in ORDERINGS:
        errors.append(t._error(f"must be one of {', '.join(ORDERINGS)}, got {t.ordering!r}", "ordering"))
        return errors
    if t.release_on not in RELEASE_ON:
        errors.append(t._error(f"must be one of {', '.join(RELEASE_ON)}, got {t.release_on!r}", "release_on"))
    if t.ordering != "key":
        if t.release_on != "dlt":
            errors.append(
                t._error("applies only with ordering: key (when a blocked key moves on)", "release_on")
            )
        return errors
    if t.on_due != "handle":
        errors.append(
            t._error(
                f"ordering: key needs on_due: handle, got {t.on_due!r}: a redelivering lane hands records "
                "back to their share group, which does not know which keys are held",
                "ordering",
            )
        )
    if t.input is not None:
        errors.append(
            t._error(
                "ordering: key orders the records of the main topic by key; a topology fed by input (a "
                "dead-letter queue of another system) has no main-topic order to keep",
                "ordering",
            )
        )
    if t.release_on == "replay" and t.dlt_strategy == "no_dlt":
        errors.append(
            t._error(
                "release_on: replay keeps a key blocked until its dead letter is replayed, but "
                "dlt_strategy: no_dlt writes no dead letter: use release_on: dlt",
                "release_on",
            )
        )
    return errors
