"""
Checks of a topology's ``input`` and ``on_due`` (:mod:`.topology.input_lane`) against the rest of it.

Where a redelivery may write is the topology's to say, never a dead letter's: each of ``input.sources`` is
a legal topic and none of the provider's own. Each check returns the problems it found, each naming its
field. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.client_names import REDELIVERY_LOG_SUFFIX, REPLAY_LOG_SUFFIX
from airflow_kafka_retry.policy.topology.input_lane import ON_DUE, TopologyInput
from airflow_kafka_retry.policy.topology.naming import TOPIC_NAME

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.errors import TopologyError
    from airflow_kafka_retry.policy.topology.shape import TopologyShape


def check_input(t: TopologyShape) -> list[TopologyError]:
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


def check_sources(t: TopologyShape) -> list[TopologyError]:
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
