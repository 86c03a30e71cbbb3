"""
Other consumers on a topology's topics: a Spring peer that may read records of aborted transactions.

The provider writes every topic of a retry path (tiers, DLTs, parking, and the main topic on a DLT
replay) in Kafka transactions, and aborts a transaction whose run was killed or fenced. A consumer with
``isolation.level=read_uncommitted`` -- the Java client's default (KIP-98), so Spring Kafka's unless
``spring.kafka.consumer.isolation-level=read_committed`` is set -- also receives those aborted records,
and handles them a second time when their chunk is routed again.

What the broker shows, and so what this check can see: the *active members* of consumer groups
(``DescribeGroups``): each member's client id, host and assigned partitions. The provider's own consumers
never join a group (they assign partitions themselves and use the group for commits only), so every member
of a topology group, and every member assigned a partition of a topology topic, is another client. A member
whose client id is the Java client's default (``consumer-<group>-<n>``) is labelled a Java client.

What it cannot see: a consumer's ``isolation.level`` (a fetch parameter the broker keeps nowhere); the
client's software name (``ApiVersions``, not in group metadata); consumers not running at the time of the
check (an empty group's committed offsets do not say which client committed them); a member of another
group that has no partition of a topology topic assigned at the moment; consumers that assign partitions
themselves without joining a group. So it warns about every such member, whatever it reads with.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

#: the Java consumer's default client id when a group is set (``ConsumerConfig``): consumer-<group>-<n>
_JAVA_DEFAULT_ID = re.compile(r"^consumer-(?P<group>.+)-\d+$")
_IDLE_STATES = {"EMPTY", "DEAD"}


@dataclass(frozen=True)
class Member:
    """One active member of a consumer group, as ``DescribeGroups`` shows it."""

    group: str
    client_id: str
    host: str
    topics: frozenset[str] = frozenset()

    @property
    def java_default_id(self) -> bool:
        """True when the client id is the Java client's default for this group (Spring Boot's too)."""
        found = _JAVA_DEFAULT_ID.match(self.client_id)
        return found is not None and found.group("group") == self.group


@dataclass(frozen=True)
class PeerGroup:
    """A consumer group with members other than this provider on the topology's topics."""

    group: str
    members: tuple[Member, ...]
    topics: tuple[str, ...] = field(default=())

    @property
    def java(self) -> bool:
        return any(m.java_default_id for m in self.members)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topics": list(self.topics),
            "java_default_client_id": self.java,
            "members": [{"client_id": m.client_id, "host": m.host} for m in self.members],
        }


def topology_groups(topology: Topology) -> set[str]:
    """The consumer groups of the topology's tiers and DLTs (Spring's too under a ``compat:`` preset)."""
    return {topology.consumer_group(t) for t in (*topology.tiers, *topology.dlt_tiers)}


def peer_groups(
    members: Iterable[Member], topics: Collection[str], groups: Collection[str]
) -> list[PeerGroup]:
    """
    The groups, by name, whose members read the topology.

    That is a member of one of ``groups``, or a member assigned a partition of one of ``topics``. Pure;
    every member is another client (see the module).
    """
    found: dict[str, list[Member]] = {}
    for member in members:
        if member.group in groups or member.topics & set(topics):
            found.setdefault(member.group, []).append(member)
    return [
        PeerGroup(
            group,
            tuple(sorted(ms, key=lambda m: (m.client_id, m.host))),
            tuple(sorted(set().union(*(m.topics for m in ms)) & set(topics))),
        )
        for group, ms in sorted(found.items())
    ]


#: said once after the groups' warnings
WHY = (
    "The provider writes these topics in Kafka transactions and aborts those of a killed or fenced run; a "
    "consumer reading read_uncommitted (the Java client's and Spring's default, KIP-98) also handles the "
    "aborted copies, so it handles those records twice. The broker does not show a consumer's isolation "
    "level: this check cannot tell whether a group above already reads read_committed"
)


def warning(peer: PeerGroup) -> str:
    """The warning for one group: who was seen and what to set (:data:`WHY` says why, once)."""
    clients = ", ".join(sorted({f"{m.client_id}@{m.host}" for m in peer.members}))
    kind = "Java client ids of the default form, as Spring Boot's" if peer.java else "not this provider's"
    reads = f"reading {', '.join(peer.topics)}" if peer.topics else "in a group of this topology"
    return (
        f"consumer group {peer.group!r} has members {clients} ({kind}; {reads}): its consumers must set "
        "isolation.level=read_committed (Spring Boot: spring.kafka.consumer.isolation-level=read_committed)"
    )


def warnings(peers: list[PeerGroup]) -> list[str]:
    """One warning per group, then :data:`WHY`; nothing without groups."""
    return [warning(p) for p in peers] + [WHY] if peers else []


def describe_members(kafka_config: Mapping[str, Any], *, timeout: float = 15.0) -> list[Member]:
    """
    The active members of every non-empty consumer group on the cluster (two admin requests).

    Raises ``KafkaException`` (or ``TimeoutError``) when the cluster does not answer or denies a group.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({k: v for k, v in kafka_config.items() if k != "group.id"})
    listed = admin.list_consumer_groups(request_timeout=timeout).result(timeout)
    ids = [
        g.group_id
        for g in listed.valid
        if not g.is_simple_consumer_group and _state(g.state) not in _IDLE_STATES
    ]
    if not ids:
        return []
    members = []
    for group_id, future in admin.describe_consumer_groups(ids, request_timeout=timeout).items():
        try:
            described = future.result(timeout)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                continue  # gone since it was listed
            raise
        for m in described.members:
            assigned = m.assignment.topic_partitions if m.assignment is not None else []
            members.append(
                Member(group_id, m.client_id or "", m.host or "", frozenset(tp.topic for tp in assigned))
            )
    return members


def _state(state: object) -> str:
    return str(getattr(state, "name", state)).upper()


def peer_consumers(
    topology: Topology, kafka_config: Mapping[str, Any], *, timeout: float = 15.0
) -> list[PeerGroup]:
    """The groups with other consumers on ``topology``'s topics or in its groups, read from the broker."""
    from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics

    return peer_groups(
        describe_members(kafka_config, timeout=timeout), topology_topics(topology), topology_groups(topology)
    )
