"""
The two topics of ``ordering: key`` (``docs/ordering.md``): their configs, and what an existing one must have.

``<topic>-hold`` keeps held copies and the tiers' marks until the keeper has read them: ``delete`` with no
time limit (``retention.ms=-1``; a user may lower it, but only above the longest hold: a held copy that ages
out is a record lost). ``<topic>-order-state`` has one entry per blocked key, its newest the truth:
``compact``. A hold topic that compacts would keep one held copy per key; a state topic that deletes would
forget a blocked key: either is reported with the command that fixes it, never altered here.
Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

CLEANUP_POLICY = "cleanup.policy"
#: The configs each topic is created with (besides the main topic's ``max.message.bytes``).
HOLD_CONFIG = {CLEANUP_POLICY: "delete", "retention.ms": "-1"}
ORDER_STATE_CONFIG = {CLEANUP_POLICY: "compact"}


def order_topics(topology: Topology) -> list[str]:
    """The hold topic and the state topic under ``ordering: key``; else none."""
    hold, state = topology.hold_topic, topology.order_state_topic
    return [hold, state] if hold is not None and state is not None else []


def order_topic_configs(topology: Topology) -> dict[str, dict[str, str]]:
    """``{topic: configs}`` of the topics :func:`order_topics` names."""
    if topology.hold_topic is None or topology.order_state_topic is None:
        return {}
    return {topology.hold_topic: dict(HOLD_CONFIG), topology.order_state_topic: dict(ORDER_STATE_CONFIG)}


def cleanup_problem(topology: Topology, topic: str, cleanup_policy: str | None) -> str | None:
    """
    What is wrong with an existing order topic's ``cleanup.policy`` (as the broker reports it); None: fine.

    The hold topic must delete and not compact, the state topic must compact and not delete. The sentence
    names the topic, both values and the ``kafka-configs.sh`` command that sets it.
    """
    wanted = order_topic_configs(topology).get(topic, {}).get(CLEANUP_POLICY)
    if wanted is None or cleanup_policy is None:
        return None
    found = {p.strip() for p in cleanup_policy.split(",") if p.strip()}
    if found == {wanted}:
        return None
    if topic == topology.hold_topic:
        why = "compaction would keep one held copy per key and lose the others"
    else:
        why = "without compaction the state of a blocked key ages out and its held records are forgotten"
    return (
        f"topic {topic!r} has {CLEANUP_POLICY}={cleanup_policy}, the keeper of {topology.topic!r} needs "
        f"{wanted} ({why}); it is not changed here: run kafka-configs.sh --bootstrap-server HOST:PORT "
        f"--alter --entity-type topics --entity-name {topic} --add-config {CLEANUP_POLICY}={wanted}"
    )
