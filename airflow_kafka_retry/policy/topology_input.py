"""
A topology's input lane when it is another framework's dead-letter queue, and what its tiers do when due.

By default a topology's tier 0 is its main topic, which the service consumes. With ``input`` the tier 0 of
the topology is a dead-letter queue another framework writes (a Kafka share group's ``dlq.<group>``, say):
the provider drains it (the topology DAG's ``main`` task, ``include_main=True``) and its records travel
the retry tiers with the topology's back-off. ``topic`` still names the tiers, the DLTs and the parking
topic, and sizes them. ``on_due`` says what a tier does with a record when it is due:

* ``handle`` (default): the run's handler processes it, as in every topology;
* ``redeliver``: it goes back to its source topic for the share consumer to take again, with its attempt
  number in ``retry_topic-attempts`` (``policy/share_redelivery.py``); only a ``share-group`` input
  says where each record came from, so only it can be redelivered.

Where a redelivery may write is the topology's to say, never a dead letter's: ``input.sources`` lists the
topics the share group consumes (default: ``topic``), and ``input.group`` names the share group whose DLQ
``input.dlq`` is (default: ``dlq`` without the broker's ``dlq.`` prefix). A source is a legal topic name and
none of the provider's own topics (tiers, DLTs, parking, their replay logs, the redelivery log) nor an
internal (``__``) or log topic of another topology.

Pure: parsing and validation only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.policy.client_names import REDELIVERY_LOG_SUFFIX, REPLAY_LOG_SUFFIX
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.naming import TOPIC_NAME

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letter_families import Family
    from airflow_kafka_retry.policy.topology import Topology

OnDue = Literal["handle", "redeliver"]
ON_DUE: tuple[OnDue, ...] = ("handle", "redeliver")
#: The dead-letter families a topology can take as its input (``unknown`` names none).
INPUT_FAMILIES: tuple[Family, ...] = (
    "share-group",
    "kafka-connect",
    "spring-retry-topic",
    "spring-dead-letter",
    "airflow",
)
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


def check_input(t: Topology) -> list[TopologyError]:
    """``input`` and ``on_due`` fit together, and the provider's group is not the share group's."""
    errors: list[TopologyError] = []
    if t.on_due not in ON_DUE:
        errors.append(t._error(f"must be one of {', '.join(ON_DUE)}, got {t.on_due!r}", "on_due"))
    source = t.input
    if source is not None and not isinstance(source, TopologyInput):
        return [*errors, t._error(f"must be a TopologyInput, got {source!r}", "input")]
    if t.on_due == "redeliver":
        if source is None:
            errors.append(
                t._error(
                    "on_due: redeliver needs an input: {family: share-group, dlq: dlq.<group>} (the records "
                    "go back to the source topic their share-group dead letter names)",
                    "on_due",
                )
            )
        elif source.family != "share-group":
            errors.append(
                t._error(
                    f"on_due: redeliver needs input.family: share-group, got {source.family!r}: only a "
                    "share group's dead letters name the source topic and partition to redeliver to and have "
                    "a share consumer that takes them again; use on_due: handle for this family",
                    "on_due",
                )
            )
        elif source.share_group is None:
            errors.append(
                t._error(
                    f"input.dlq {source.dlq!r} does not follow the broker's default name dlq.<group>, so the "
                    "topology cannot tell which share group's dead letters it redelivers: name it "
                    "(input.group: <share group>)",
                    "input.group",
                )
            )
    if source is not None and (source.sources or source.group is not None) and t.on_due != "redeliver":
        errors.append(
            t._error(
                "input.sources and input.group say where on_due: redeliver may write and whose dead letters "
                f"it redelivers; this topology's tiers handle their records (on_due: {t.on_due}): drop them",
                "input.sources" if source.sources else "input.group",
            )
        )
    if source is not None and source.family == "share-group" and t.group_id == source.share_group:
        errors.append(
            t._error(
                f"{t.group_id!r} is the share group whose DLQ is {source.dlq!r}; group_id is the provider's "
                "consumer group of input.dlq (and names its tiers' groups), and Kafka has one namespace for "
                "consumer and share groups: pick another id",
                "group_id",
            )
        )
    return errors


def check_sources(t: Topology) -> list[TopologyError]:
    """
    Each of ``input.sources`` is a legal topic the provider may redeliver to: none of its own, listed once.

    Run once the tiers are built (their names are the ones checked against).
    """
    if t.input is None or t.on_due != "redeliver":
        return []
    own = {tier.topic: f"tier {tier.index}" for tier in t.tiers}
    for tier in t.dlt_tiers:
        own[tier.topic] = "DLT"
        own[tier.topic + REPLAY_LOG_SUFFIX] = f"DLT {tier.topic}'s replay log"
    if t.parking_topic is not None:
        own[t.parking_topic] = "parking topic"
        own[t.parking_topic + REPLAY_LOG_SUFFIX] = "parking topic's replay log"
    own[t.topic + REDELIVERY_LOG_SUFFIX] = "redelivery log"
    errors: list[TopologyError] = []
    seen: set[str] = set()
    for index, topic in enumerate(t.input.sources):
        where = f"input.sources[{index}]"
        if not isinstance(topic, str) or not TOPIC_NAME.match(topic):
            why = "is not a legal Kafka topic name (1-249 characters from a-z A-Z 0-9 . _ -)"
        elif topic in own:
            why = f"is the topology's own {own[topic]}, which a redelivery must never write"
        elif topic.startswith("__"):
            why = "is a Kafka internal topic, never a share group's source"
        elif topic.endswith((REPLAY_LOG_SUFFIX, REDELIVERY_LOG_SUFFIX)):
            why = "is a replay or redelivery log (the provider's bookkeeping), never a share group's source"
        elif topic in seen:
            why = "is listed twice"
        else:
            seen.add(topic)
            continue
        shown = repr(topic[:100]) if isinstance(topic, str) else repr(topic)
        errors.append(t._error(f"{shown} {why}; list the topics the share group consumes", where))
    return errors
