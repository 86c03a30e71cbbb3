"""
Which node of a Kafka cluster does what: Kafka's coordinator hash, and the metadata quorum's leader.

A group's coordinator is the leader of partition ``Utils.abs(groupId.hashCode()) % partitions`` of
``__consumer_offsets``, a transactional id's the leader of the same partition of ``__transaction_state``
(``GroupCoordinatorService.partitionFor``, ``TransactionStateManager.partitionFor``). ``hashCode`` is
Java's ``String.hashCode`` (over UTF-16 code units, signed 32-bit) and ``Utils.abs`` is ``Math.abs`` except
that ``Integer.MIN_VALUE`` gives 0 (not ``x & 0x7fffffff``: that is ``Utils.toPositive``, the producer
partitioner's, and it names another partition for every other negative hash; read from the 4.1.2 bytecode
and checked against the partitions a broker wrote groups' offsets to).

The active controller comes from a ``DescribeQuorum`` request to a node's controller listener: a KRaft
broker names a random live broker as "controller" in its metadata and ``DescribeCluster`` answers (the
clients cannot reach the controllers), so those do not tell.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, ClusterMetadata

_DESCRIBE_QUORUM = 55
_METADATA_TOPIC = b"__cluster_metadata"
_CORRELATION = itertools.count(1)


def java_string_hashcode(value: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + … + s[n-1]`` over UTF-16 code units, signed."""
    units = value.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs`` of a Java int: ``Math.abs``, but 0 for ``Integer.MIN_VALUE``."""
    return 0 if value == -(2**31) else abs(value)


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` / ``__transaction_state`` of a group / transactional id."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, not {partitions}")
    return kafka_abs(java_string_hashcode(key)) % partitions


def partition_leader(metadata: ClusterMetadata, topic: str, partition: int) -> int:
    """The leader of ``topic``/``partition`` in a metadata answer (``-1``: none right now)."""
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or partition not in found.partitions:
        raise RuntimeError(f"no metadata for {topic}-{partition}: {found.error if found else 'no topic'}")
    return int(found.partitions[partition].leader)


def coordinator_leader(metadata: ClusterMetadata, topic: str, key: str) -> int:
    """The leader of the partition of ``topic`` (an internal one) that ``key`` maps to."""
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise RuntimeError(f"{topic} has no partitions yet: {found.error if found else 'no topic'}")
    return partition_leader(metadata, topic, coordinator_partition(key, len(found.partitions)))


def out_of_isr(metadata: ClusterMetadata, node_id: int) -> list[str]:
    """The internal topics' partitions with a leader that ``node_id`` replicates but is not in sync with."""
    return [
        f"{name}-{p.id}"
        for name, topic in metadata.topics.items()
        if name.startswith("__")
        for p in topic.partitions.values()
        if node_id in p.replicas and node_id not in p.isrs and p.leader >= 0
    ]


class ClusterRoles:
    """
    Who leads a partition, the metadata quorum, a group or a transaction.

    For a cluster class that has ``admin()`` (a client of its live nodes), ``controller_ports()`` (node
    id to controller port, of the live nodes) and ``request_timeout`` (seconds, for every request).
    """

    request_timeout: float

    def admin(self) -> AdminClient:
        raise NotImplementedError

    def controller_ports(self) -> dict[int, int]:
        raise NotImplementedError

    def leader_of(self, topic: str, partition: int) -> int:
        """The node leading ``topic``/``partition`` in a fresh metadata answer (``-1``: none right now)."""
        return partition_leader(self._metadata(topic), topic, partition)

    def _metadata(self, topic: str) -> ClusterMetadata:
        """Metadata naming ``topic``: a broker may learn of a new topic a moment after another one."""
        deadline = time.monotonic() + self.request_timeout
        while True:
            metadata = self.admin().list_topics(topic, timeout=self.request_timeout)
            found = metadata.topics.get(topic)
            if (found is not None and found.error is None) or time.monotonic() >= deadline:
                return metadata
            time.sleep(0.1)

    def active_controller(self) -> int:
        """
        The node leading the KRaft metadata quorum: ``DescribeQuorum`` to each live controller in turn.

        Only the leader answers it (the others say ``NOT_LEADER_OR_FOLLOWER``); while the quorum elects a
        new one (its leader killed or frozen, say) the question is repeated until ``request_timeout``.
        """
        deadline = time.monotonic() + self.request_timeout
        while True:
            errors = []
            for node_id, port in self.controller_ports().items():
                try:
                    return quorum_leader("127.0.0.1", port, min(2.0, self.request_timeout))
                except (OSError, RuntimeError) as exc:
                    errors.append(f"node {node_id}: {exc}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no controller named itself the quorum's leader: {errors or 'none runs'}")
            time.sleep(0.2)

    def group_coordinator(self, group_id: str) -> int:
        """The node coordinating ``group_id``: the leader of its ``__consumer_offsets`` partition."""
        topic = "__consumer_offsets"
        return coordinator_leader(
            self.admin().list_topics(topic, timeout=self.request_timeout), topic, group_id
        )

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node coordinating ``transactional_id``: the leader of its ``__transaction_state`` partition."""
        topic = "__transaction_state"
        return coordinator_leader(self._metadata(topic), topic, transactional_id)


# ----------------------------------------------------------------------------- DescribeQuorum (v0)
def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def compact_bytes(self) -> bytes:
        size = self.uvarint() - 1
        value = self.data[self.pos : self.pos + max(size, 0)]
        self.pos += max(size, 0)
        return value


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("the controller closed the connection before its answer was whole")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def quorum_leader(host: str, controller_port: int, timeout: float = 5.0) -> int:
    """
    The node id of the KRaft quorum's leader (the active controller), asked of a controller listener.

    Only the leader itself answers with its id; the other controllers answer ``NOT_LEADER_OR_FOLLOWER``.

    Raises ``OSError`` when the controller does not answer within ``timeout`` and ``RuntimeError`` when it
    answers with an error or knows no leader yet (``-1``).
    """
    correlation = next(_CORRELATION) & 0x7FFFFFFF
    client = b"airflow-kafka-retry"
    header = struct.pack(">hhih", _DESCRIBE_QUORUM, 0, correlation, len(client)) + client + b"\0"
    body = (
        _uvarint(2)  # topics: one
        + _uvarint(len(_METADATA_TOPIC) + 1)
        + _METADATA_TOPIC
        + _uvarint(2)  # partitions: one
        + struct.pack(">i", 0)
        + b"\0\0\0"  # tags of the partition, the topic, the request
    )
    request = header + body
    with socket.create_connection((host, controller_port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        reader = _Reader(_recv_exactly(sock, size))
    if reader.take(">i") != correlation:
        raise RuntimeError("DescribeQuorum: the answer carries another correlation id")
    reader.skip_tags()
    error = reader.take(">h")
    if not error and reader.uvarint() > 1:  # one topic
        reader.compact_bytes()
        if reader.uvarint() > 1:  # one partition
            reader.take(">i")
            error = reader.take(">h")
            leader = reader.take(">i")
            if not error and leader >= 0:
                return leader
            raise RuntimeError(f"DescribeQuorum on {host}:{controller_port}: error {error}, leader {leader}")
    raise RuntimeError(
        f"DescribeQuorum on {host}:{controller_port}: error {error}, no partition in the answer"
    )
