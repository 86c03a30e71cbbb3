"""
Other frameworks' dead-letter queues a topology watches beside its own DLTs: ``dead_letter_queues``.

A platform's dead letters are not all in the topology's own DLTs: a Kafka Connect sink writes its
failures to ``errors.deadletterqueue.topic.name``, a share group to ``dlq.<group>``, Airflow's
``KafkaSharedStreamTrigger`` to its ``dlq_topic``. A topology can name such queues; the DLT watch (its
operator and the topology DAG's ``watch_dlt`` lane), the "Retry tiers" view and ``dlt inspect`` /
``dlt replay`` then read them too::

    dead_letter_queues:
      - dlq.orders-share                                  # family detected per record from its headers
      - {topic: connect-dlq-payments, family: kafka-connect}

Each record's family is still detected from its headers; ``family`` names what a record *without* a
family header is (a Connect DLQ without context headers, Airflow's provider's dead letters, which carry
none). Parsing only; :func:`~airflow_kafka_retry.policy.topology.checks.check_dead_letter_queues` checks
the queues against the topology's own topics. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.dead_letters.families import INPUT_FAMILIES
from airflow_kafka_retry.policy.errors import TopologyError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letters.families import Family

FIELD = "dead_letter_queues"
_KEYS = ("topic", "family")
#: The families a queue can be named with (``unknown`` names none: leave ``family`` out).
QUEUE_FAMILIES: tuple[Family, ...] = INPUT_FAMILIES


@dataclass(frozen=True)
class DeadLetterQueue:
    """
    A dead-letter queue another framework writes, watched with the topology's DLTs.

    :param topic: the queue's topic, in full.
    :param family: what a record with no family header is (:data:`QUEUE_FAMILIES`); None: ``unknown``.
    """

    topic: str
    family: Family | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "family": self.family}


def read_dead_letter_queues(
    data: object, source: str
) -> tuple[tuple[DeadLetterQueue, ...], list[TopologyError]]:
    """
    Every entry in its place and the problems found, so the topology's checks name the same indexes.

    An entry with a problem is kept as far as it is sound (a bad family as None, a bad topic as written,
    an entry that is not a mapping as it is); the topology's checks report its problem's field again, and
    :func:`~airflow_kafka_retry.policy.topology.mapping.topology_arguments` keeps one problem per field.
    """
    if not isinstance(data, list | tuple):
        return (), [
            TopologyError(
                "must be a list of dead-letter topics, each a name or {topic: NAME, family: FAMILY}, "
                f"got {data!r}",
                field=FIELD,
                source=source,
            )
        ]
    errors: list[TopologyError] = []
    queues: list[Any] = []

    def fail(problem: str, field_name: str) -> None:
        errors.append(TopologyError(problem, field=field_name, source=source))

    for index, written in enumerate(data):
        where = f"{FIELD}[{index}]"
        entry = {"topic": written} if isinstance(written, str) else written
        if not isinstance(entry, Mapping):
            fail(f"must be a topic name or a mapping {{topic: NAME, family: FAMILY}}, got {entry!r}", where)
            queues.append(entry)
            continue
        for key in entry:
            if key not in _KEYS:
                hint = difflib.get_close_matches(str(key), _KEYS, n=1)
                known = f"did you mean {hint[0]!r}?" if hint else f"known keys: {', '.join(_KEYS)}"
                fail(f"unknown key; {known}", f"{where}.{key}")
        topic, family = entry.get("topic"), entry.get("family")
        if not isinstance(topic, str) or not topic:
            fail(f"must name the dead-letter topic in full, got {topic!r}", f"{where}.topic")
        if family is not None and family not in QUEUE_FAMILIES:
            fail(
                f"must be one of {', '.join(QUEUE_FAMILIES)} (what a record without any family's "
                f"headers is), or left out to detect each record's family from its headers; got {family!r}",
                f"{where}.family",
            )
            family = None  # reported: the topology's checks see the rest of the entry
        queues.append(DeadLetterQueue(topic, family))  # type: ignore[arg-type]  # the checks name a bad one
    return tuple(queues), errors
