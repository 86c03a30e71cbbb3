"""
Checks of a topology's ``redrive`` policies (:mod:`~airflow_kafka_retry.policy.redrive.policies`) against it.

A policy reads one of the topology's DLTs (and its parking topic), writes to its main topic or a retry tier,
and parks into its parking topic: so the topology needs a DLT, ``dlt`` must be one of its DLTs and ``to``
one of its tiers. Under ``ordering: key`` with ``release_on: replay`` a blocked key follows its head through
marks a scheduled round would have to keep for parked records too: refused. Each check returns the
problems it found, each naming its field. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.redrive.policies import FIELD, RedrivePolicy
from airflow_kafka_retry.policy.topology.naming import TOPIC_NAME

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.errors import TopologyError
    from airflow_kafka_retry.policy.topology.shape import TopologyShape


def check_redrive(t: TopologyShape) -> list[TopologyError]:
    """Every policy has a name of its own, reads a DLT of the topology and writes to one of its tiers."""
    policies = t.redrive
    if not policies:
        return []
    if not isinstance(policies, tuple) or not all(isinstance(p, RedrivePolicy) for p in policies):
        return [t._error(f"must be a tuple of RedrivePolicy, got {policies!r}", FIELD)]
    if t.dlt_strategy == "no_dlt":
        return [t._error("a redrive policy reads a DLT, but dlt_strategy: no_dlt writes none", FIELD)]
    if t.ordering == "key" and t.release_on == "replay":
        return [
            t._error(
                "redrive policies are not supported with ordering: key and release_on: replay (a blocked key "
                "waits for its dead letter's replay by hand, or airflow-kafka-retry ordering release); use "
                "release_on: dlt, or replay by hand",
                FIELD,
            )
        ]
    errors: list[TopologyError] = []
    dlts = [tier.topic for tier in t.dlt_tiers]
    tiers = [tier.topic for tier in t.tiers]
    names: set[str] = set()
    for index, policy in enumerate(policies):
        where = f"{FIELD}[{index}]"
        if policy.name and policy.name in names:
            errors.append(
                t._error(
                    f"{policy.name!r} names another policy too; each policy needs its own name (it names the "
                    "policy's task and its rounds' replay ids)",
                    f"{where}.name",
                )
            )
        names.add(policy.name)
        if policy.dlt is not None and policy.dlt not in dlts:
            errors.append(
                t._error(f"{policy.dlt!r} is not a DLT of this topology ({', '.join(dlts)})", f"{where}.dlt")
            )
        if policy.to == "first-tier" and len(tiers) < 2:
            errors.append(
                t._error(f"first-tier: there is no retry tier (attempts: {t.attempts})", f"{where}.to")
            )
        elif policy.to not in ("main", "first-tier", *tiers):
            errors.append(
                t._error(
                    f"must be main, first-tier or one of the topology's tiers ({', '.join(tiers)}), got "
                    f"{policy.to!r}: a policy writes only to its own topology's topics",
                    f"{where}.to",
                )
            )
        for i, topic in enumerate(policy.original_topic):
            if not TOPIC_NAME.match(topic):
                errors.append(
                    t._error(f"{topic!r} is not a legal Kafka topic name", f"{where}.original_topic[{i}]")
                )
    return errors
