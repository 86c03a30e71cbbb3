"""
``ordering release``: release a blocked key by hand, with a ``release`` mark in ``<topic>-hold``.

The key is named by its bytes (``--key``: UTF-8, ``--key-hex``: any bytes); only its key id (the first 16
bytes of its SHA-256) is used, printed and logged. Which partition blocks it is read from the state topic, not
guessed from a partitioner: a key no partition's state names is not blocked, and nothing is written. The mark
(``at``: the head the command saw, ``by``, ``reason``) goes to the hold topic's partition of that state, with
an idempotent producer (``acks=all``) whose delivery has a deadline; the keeper of that partition handles the
key's held records in its next run. A mark whose ``at`` no longer names the head (the head moved meanwhile)
releases nothing: the keeper logs it, and the command can be run again.
"""

from __future__ import annotations

import getpass
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, Producer

from airflow_kafka_retry.engine.kafka.clients import (
    AUTHORIZATION_CODES,
    KafkaConfigError,
    partition_counts,
    principal_of,
    producer_config,
)
from airflow_kafka_retry.engine.scans.order_state import read_order_state
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Mark, key_id

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from airflow_kafka_retry.policy.ordering.entries import BlockedKey
    from airflow_kafka_retry.policy.topology.model import Topology

#: The audit trail of hand releases (key ids only, never a key).
audit = logging.getLogger("airflow_kafka_retry.audit")
#: The longest a reason may be (it travels in the mark).
MAX_REASON = 1_000


class NotBlocked(LookupError):
    """No partition's state names the key: there is nothing to release."""


class ReleaseError(ValueError):
    """The release cannot be made (topology, topics, broker); the message says why and what to do."""


def key_bytes(key: str | None, key_hex: str | None) -> bytes:
    """The key's raw bytes from ``--key`` (UTF-8) or ``--key-hex``: exactly one of them."""
    if (key is None) == (key_hex is None):
        raise ReleaseError("name the key with exactly one of --key (UTF-8) and --key-hex (its bytes in hex)")
    if key is not None:
        return key.encode("utf-8")
    text = (key_hex or "").removeprefix("0x")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ReleaseError(f"--key-hex {key_hex!r} is not hex (two digits a byte, e.g. 0a1b)") from None


def operator_name(by: str | None) -> str:
    """Who releases: ``--by``, else the OS user."""
    if by is not None:
        if not by.strip():
            raise ReleaseError("--by must name someone")
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@dataclass(frozen=True)
class Released:
    """What ``release`` did: where the mark landed, and the block it released."""

    key_id: bytes
    hold: str
    partition: int
    mark_offset: int
    entry: BlockedKey
    by: str
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id.hex(),
            "partition": self.partition,
            "head": str(self.entry.head),
            "head_main_offset": self.entry.head_main_offset,
            "held": len(self.entry.held),
            "in_dlt": self.entry.in_dlt,
            "since_ms": self.entry.since_ms,
            "mark": f"{self.hold}[{self.partition}]@{self.mark_offset}",
            "by": self.by,
            "reason": self.reason,
        }


def release_key(
    topology: Topology,
    kafka_config: Mapping[str, Any],
    key: bytes,
    *,
    partition: int | None = None,
    by: str,
    reason: str | None = None,
    timeout_s: float = 30.0,
    clock: Callable[[], int] = lambda: int(time.time() * 1000),
) -> Released:
    """
    Write a ``release`` mark for ``key`` to the hold topic's partition whose state blocks it.

    :param partition: only this partition's state is looked at (default: every partition's).
    :raises NotBlocked: no (such) partition's state names the key.
    :raises ReleaseError: the topology has no ``ordering: key``, a topic is missing, the principal may not
        write the hold topic, the mark was not delivered within ``timeout_s``.
    """
    hold, state_topic = topology.hold_topic, topology.order_state_topic
    if hold is None or state_topic is None:
        raise ReleaseError(
            f"topology of {topology.topic}: ordering is {topology.ordering!r}, so no key is ever held; "
            "ordering release applies to a topology with ordering: key"
        )
    if reason is not None and len(reason) > MAX_REASON:
        raise ReleaseError(f"--reason is {len(reason)} characters; at most {MAX_REASON}")
    kid = key_id(key) or b""  # a key's bytes always have one
    deadline = time.monotonic() + timeout_s
    try:
        state = read_order_state(kafka_config, state_topic, timeout_s=timeout_s, raise_errors=True)
    except KafkaConfigError as exc:
        raise ReleaseError(str(exc)) from None
    if partition is not None and not 0 <= partition < len(state.partitions):
        raise ReleaseError(
            f"--partition {partition}: {state_topic} has partitions 0-{len(state.partitions) - 1}"
        )
    parts = [p for p in state.partitions if partition is None or p.partition == partition]
    found = next(((p.partition, p.entries[kid]) for p in parts if kid in p.entries), None)
    if found is None:
        where = state_topic if partition is None else f"{state_topic}[{partition}]"
        raise NotBlocked(f"key id {kid.hex()} is not blocked: {where} names no such key (nothing written)")
    p, entry = found
    mark = Mark(key_id=kid, kind="release", at=entry.head, by=by, reason=reason, ms=clock())
    offset = _write(kafka_config, hold, p, mark, max(1.0, deadline - time.monotonic()))
    audit.info(
        "ordering release: key id %s of %s[%s] released by %s (head %s, %s held, mark %s[%s]@%s)%s",
        kid.hex(),
        topology.topic,
        p,
        by,
        entry.head,
        len(entry.held),
        hold,
        p,
        offset,
        f": {reason}" if reason else "",
    )
    return Released(kid, hold, p, offset, entry, by, reason)


def _write(kafka_config: Mapping[str, Any], hold: str, partition: int, mark: Mark, timeout_s: float) -> int:
    """Produce ``mark`` to ``hold[partition]`` and wait for its acknowledgement; its offset."""
    config = producer_config(kafka_config, None)
    config["message.timeout.ms"] = max(1000, int(timeout_s * 1000))
    producer = Producer(config)
    try:
        count = partition_counts(producer, [hold], timeout=timeout_s, kafka_config=kafka_config)[hold]
    except KafkaConfigError as exc:
        raise ReleaseError(str(exc)) from None
    if partition >= count:
        raise ReleaseError(
            f"{hold} has {count} partition(s), but the state names partition {partition}: the hold topic "
            "needs the main topic's partition count (airflow-kafka-retry topology create-topics)"
        )
    report: dict[str, Any] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        report["error"], report["offset"] = err, None if err is not None else msg.offset()

    producer.produce(
        hold,
        key=mark.key_id,
        value=mark.to_bytes(),
        headers=[(ORDER_HEADER, MARK)],
        partition=partition,
        on_delivery=delivered,
    )
    producer.flush(timeout_s)
    error = report.get("error")
    if not report:
        raise ReleaseError(
            f"{hold}[{partition}]: the release mark was not acknowledged within {timeout_s:.0f}s"
        )
    if error is not None:
        if error.code() in AUTHORIZATION_CODES:
            raise ReleaseError(
                f"{principal_of(kafka_config)} is not authorized to WRITE topic {hold} ({error.str()}): "
                "grant the ACLs `airflow-kafka-retry topology acls FILE` prints"
            )
        raise ReleaseError(f"{hold}[{partition}]: the release mark was not written: {error.str()}")
    return int(report["offset"])
