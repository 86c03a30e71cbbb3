"""
A topology's input lane when it is another framework's dead-letter queue, and what its tiers do when due.

By default a topology's tier 0 is its main topic, which the service consumes. With ``input`` the tier 0 of
the topology is a dead-letter queue another framework writes (a Kafka share group's ``dlq.<group>``, say):
the provider drains it (the topology DAG's ``main`` task, ``include_main=True``) and its records travel
the retry tiers with the topology's back-off. ``topic`` still names the tiers, the DLTs and the parking
topic, and sizes them. ``on_due`` says what a tier does with a record when it is due:

* ``handle`` (default): the run's handler processes it, as in every topology;
* ``redeliver``: it goes back to its source topic for the share consumer to take again, with its attempt
  number in ``retry_topic-attempts`` (``policy/routing/share_redelivery.py``); only a ``share-group`` input
  says where each record came from, so only it can be redelivered.

Where a redelivery may write is the topology's to say, never a dead letter's: ``input.sources`` lists the
topics the share group consumes (default: ``topic``), and ``input.group`` names the share group whose DLQ
``input.dlq`` is (default: ``dlq`` without the broker's ``dlq.`` prefix). A source is a legal topic name and
none of the provider's own topics (tiers, DLTs, parking, their replay logs, the redelivery log) nor an
internal (``__``) or log topic of another topology.

Pure: parsing only; :mod:`.topology.input_checks` checks ``input`` and ``on_due`` against the topology.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.policy.dead_letters.families import INPUT_FAMILIES
from airflow_kafka_retry.policy.errors import TopologyError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letters.families import Family

OnDue = Literal["handle", "redeliver"]
ON_DUE: tuple[OnDue, ...] = ("handle", "redeliver")
_INPUT_KEYS = ("family", "dlq", "sources", "group")
#: The broker's default ``errors.deadletterqueue.topic.name.prefix``: a share group's DLQ is ``dlq.<group>``.
SHARE_DLQ_PREFIX = "dlq."


@dataclass(frozen=True)
class TopologyInput:
    """
    The dead-letter queue a topology drains as its tier 0.

    :param family: which framework writes it (:data:`INPUT_FAMILIES`).
    :param dlq: the DLQ topic.
    :param sources: under ``on_due: redeliver``, the topics a redelivery may go back to (empty: the
        topology's ``topic`` alone).
    :param group: the share group whose DLQ ``dlq`` is (None: ``dlq`` after the ``dlq.`` prefix).
    """

    family: Family
    dlq: str
    sources: tuple[str, ...] = ()
    group: str | None = None

    @property
    def share_group(self) -> str | None:
        """The share group whose dead letters ``dlq`` holds: ``group``, else the name after ``dlq.``."""
        if self.group is not None:
            return self.group
        if self.dlq.startswith(SHARE_DLQ_PREFIX) and len(self.dlq) > len(SHARE_DLQ_PREFIX):
            return self.dlq[len(SHARE_DLQ_PREFIX) :]
        return None

    def redelivery_sources(self, topic: str) -> tuple[str, ...]:
        """The topics a redelivery may go back to: ``sources``, else the topology's ``topic``."""
        return self.sources or (topic,)

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"family": self.family, "dlq": self.dlq}
        if self.sources:
            data["sources"] = list(self.sources)
        if self.group is not None:
            data["group"] = self.group
        return data


def parse_input(data: object, source: str) -> TopologyInput:
    """``input: {family: share-group, dlq: dlq.orders-share}``; a TopologyError names each bad field."""
    if not isinstance(data, Mapping):
        raise TopologyError(
            f"must be a mapping like {{family: share-group, dlq: dlq.<group>}}, got {data!r}",
            field="input",
            source=source,
        )
    errors = [
        TopologyError(
            f"unknown key; known keys: {', '.join(_INPUT_KEYS)}", field=f"input.{key}", source=source
        )
        for key in data
        if key not in _INPUT_KEYS
    ]
    family, dlq = data.get("family"), data.get("dlq")
    sources, group = data.get("sources", ()), data.get("group")
    if family not in INPUT_FAMILIES:
        errors.append(
            TopologyError(
                f"must be one of {', '.join(INPUT_FAMILIES)}, got {family!r}",
                field="input.family",
                source=source,
            )
        )
    if not isinstance(dlq, str) or not dlq:
        errors.append(
            TopologyError(
                f"must name the dead-letter topic the topology drains (a share group's is dlq.<group>), "
                f"got {dlq!r}",
                field="input.dlq",
                source=source,
            )
        )
    if sources is None:
        sources = ()
    if isinstance(sources, str):
        sources = (sources,)
    if not isinstance(sources, (list, tuple)) or not all(isinstance(s, str) for s in sources):
        errors.append(
            TopologyError(
                f"must be a list of topic names (the topics the share group consumes), got {sources!r}",
                field="input.sources",
                source=source,
            )
        )
    if group is not None and (not isinstance(group, str) or not group.strip()):
        errors.append(
            TopologyError(
                f"must name the share group whose DLQ input.dlq is, got {group!r}",
                field="input.group",
                source=source,
            )
        )
    if errors:
        raise TopologyError.combine(errors)
    # family checked against INPUT_FAMILIES above
    return TopologyInput(family, dlq, tuple(sources), group)  # type: ignore[arg-type]
