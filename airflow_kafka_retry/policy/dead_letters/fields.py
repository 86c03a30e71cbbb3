"""
What a dead letter's headers say, as a report shows it: every field, header strings bounded.

``dlt inspect``'s samples (``dlt/groups.py``) and the DLT watch's samples
(``engine/scans/dead_letter_counts.py``) both show a record by its DLT coordinates and these fields; never its
key or value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.headers.bounds import bound_message, bound_value

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letters.families import DeadLetter


def dead_letter_fields(letter: DeadLetter) -> dict[str, Any]:
    """The family, original coordinates and failure of ``letter``; ``families`` only when it mixes several."""
    return {
        "family": letter.family,
        "original_topic": bound_value(letter.original_topic),
        "original_partition": letter.original_partition,
        "original_offset": letter.original_offset,
        "original_timestamp_ms": letter.original_timestamp_ms,
        "failed_at_ms": letter.failed_at_ms,
        "group": bound_value(letter.group),
        "connector": bound_value(letter.connector),
        "task": letter.task,
        "failure_class": bound_value(letter.failure_class),
        "failure_cause": bound_value(letter.failure_cause),
        "failure_message": bound_message(letter.failure_message),
        "delivery_count": letter.delivery_count,
        "record_copied": letter.record_copied,
        "missing": list(letter.missing),
        "unreadable": {name: bound_value(why) for name, why in letter.unreadable},
        **({"families": list(letter.families)} if len(letter.families) > 1 else {}),
    }
