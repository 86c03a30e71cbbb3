"""Measure, once per test run, which Kafka behaviours the broker under test really has.

Tests that depend on one of these behaviours are skipped (with the reason) on brokers that lack
it, instead of passing by accident; the same tests run in full against real Kafka. Every check
uses its own explicitly created single-partition topic, runs in its own daemon thread with a
deadline, and turns any error into "missing, because ...".

``delete_records`` policy: on Tansu 0.6 a DeleteRecords request panics the broker's connection
task (the broker itself keeps serving other connections). So by default it is *not sent* to a
broker whose cluster id names it as Tansu (reported missing, "not probed: ..."); on any other
broker it is sent last, from a throwaway AdminClient with short timeouts, and the probe then
checks with a fresh client that the broker still answers (``BrokerProbeError`` if not).
``probe_delete_records=True`` forces the request, ``False`` never sends it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from airflow_kafka_retry.testing.topics import CLIENT_LOGGER, admin_client, create_topics, delete_topics

log = logging.getLogger(__name__)

#: Names of the boolean capability fields, in probe order.
CAPABILITIES: tuple[str, ...] = ("abort_isolation", "exact_high_watermark", "timestamp_lookup",
                                 "enforces_max_message_bytes", "delete_records")

TANSU_DELETE_RECORDS_REASON = ("not probed: DeleteRecords is known to crash Tansu's connection task "
                               "(not implemented in Tansu 0.6)")


class BrokerProbeError(RuntimeError):
    """The broker could not be reached, or stopped answering after the probes."""


@dataclass(frozen=True)
class BrokerCapabilities:
    """Which optional-in-practice Kafka behaviours a broker has; ``reasons`` explains each missing one."""

    abort_isolation: bool = False
    """Records of an aborted transaction are hidden from ``read_committed`` consumers."""
    exact_high_watermark: bool = False
    """ListOffsets(latest) and ``get_watermark_offsets(cached=False)`` equal the true log end."""
    timestamp_lookup: bool = False
    """``offsets_for_times`` finds the first offset at or after a timestamp."""
    enforces_max_message_bytes: bool = False
    """A record larger than the topic's ``max.message.bytes`` is rejected."""
    delete_records: bool = False
    """``AdminClient.delete_records`` moves the low watermark."""
    reasons: dict[str, str] = field(default_factory=dict, hash=False)
    cluster_id: str | None = None
    is_tansu: bool = False
    probe_seconds: float = 0.0

    @classmethod
    def everything(cls, **overrides: object) -> BrokerCapabilities:
        """All capabilities present (a real Kafka broker), with optional field overrides."""
        values: dict[str, object] = {name: True for name in CAPABILITIES}
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def has(self, name: str) -> bool:
        """Whether capability ``name`` is present; ``ValueError`` for an unknown name."""
        _check_name(name)
        return bool(getattr(self, name))

    def missing(self) -> dict[str, str]:
        """``{name: reason}`` for every missing capability."""
        return {n: self.reasons.get(n, "no reason recorded") for n in CAPABILITIES if not getattr(self, n)}

    def summary_lines(self) -> list[str]:
        """Human-readable lines, one per capability, for the pytest terminal summary."""
        kind = "Tansu" if self.is_tansu else "Kafka"
        lines = [f"broker capabilities ({kind}, cluster id {self.cluster_id!r}, "
                 f"probed in {self.probe_seconds:.1f}s):"]
        for name in CAPABILITIES:
            if getattr(self, name):
                lines.append(f"  {name}: yes")
            else:
                lines.append(f"  {name}: NO - {self.reasons.get(name, 'no reason recorded')}")
        return lines


def _check_name(name: str) -> None:
    if name not in CAPABILITIES:
        raise ValueError(f"unknown broker capability {name!r}; known: {', '.join(CAPABILITIES)}")


def missing_reason(caps: BrokerCapabilities, name: str) -> str | None:
    """``None`` if ``caps`` has ``name``, else a skip message naming the capability and why it is missing."""
    if caps.has(name):
        return None
    return f"broker lacks capability {name!r}: {caps.reasons.get(name, 'no reason recorded')}"


# ----------------------------------------------------------------------------- client helpers
_SESSION_TIMEOUT_MS = "6000"


def _producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER,
                               "linger.ms": 20, "message.timeout.ms": 5000}
    conf.update(extra)
    return Producer(conf)


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER,
                               "group.id": f"caps-probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                               "auto.offset.reset": "earliest", "session.timeout.ms": _SESSION_TIMEOUT_MS}
    conf.update(extra)
    return Consumer(conf)


def _produce(producer: Producer, topic: str, values: list[bytes], *, timeout: float,
             timestamps: list[int] | None = None) -> list[tuple[KafkaError | None, int]]:
    """Produce to partition 0, flush, return ``(error, offset)`` per record in order."""
    results: list[tuple[KafkaError | None, int]] = [(None, -1)] * len(values)

    def report(i: int) -> Callable[[KafkaError | None, object], None]:
        def cb(err: KafkaError | None, msg: object) -> None:
            results[i] = (err, msg.offset() if err is None else -1)  # type: ignore[attr-defined]
        return cb

    for i, value in enumerate(values):
        kw: dict[str, object] = {"partition": 0, "value": value, "on_delivery": report(i)}
        if timestamps is not None:
            kw["timestamp"] = timestamps[i]
        producer.produce(topic, **kw)
    if producer.flush(timeout):
        raise TimeoutError(f"records to {topic} not delivered within {timeout:.0f}s")
    return results


def _delivered_offsets(results: list[tuple[KafkaError | None, int]]) -> list[int]:
    errors = [err for err, _ in results if err is not None]
    if errors:
        raise KafkaException(errors[0])
    return [offset for _, offset in results]


# ----------------------------------------------------------------------------- checks
# Each check gets (bootstrap, topic, timeout) and returns None when the capability is present,
# else the reason it is missing. The topic already exists with one partition.

def _check_abort_isolation(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = _producer(bootstrap, **{"transactional.id": f"{topic}-tx"})
    producer.init_transactions(timeout)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(timeout)  # on the broker before the abort, not purged client-side
    producer.abort_transaction(timeout)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(timeout)

    consumer = _consumer(bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = _read_to_eof(consumer, until=b"committed", timeout=timeout)
    finally:
        consumer.close()
    if b"committed" not in values:
        return f"read_committed consumer never saw the committed record (got {values!r})"
    aborted = values.count(b"aborted")
    if aborted:
        return f"read_committed consumer saw {aborted} of 3 records of an aborted transaction"
    return None


def _read_to_eof(consumer: Consumer, *, until: bytes, timeout: float) -> list[bytes]:
    """Values read until partition EOF is reached after ``until`` was seen (or the deadline)."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                if until in values:
                    break
                continue
            raise KafkaException(msg.error())
        values.append(msg.value())
    return values


def _check_exact_high_watermark(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = _producer(bootstrap, **{"linger.ms": 50})
    offsets: list[int] = []
    for batch in range(3):  # three multi-record batches
        offsets += _delivered_offsets(_produce(producer, topic, [b"%d" % batch] * 5, timeout=timeout))
    log_end = max(offsets) + 1
    tp = TopicPartition(topic, 0)
    consumer = _consumer(bootstrap)
    try:
        _, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    finally:
        consumer.close()
    admin = admin_client(bootstrap)  # keep a reference until the future resolves
    latest = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=timeout)[tp].result(timeout).offset
    if high == log_end and latest == log_end:
        return None
    return (f"after 3 batches of 5 records the log end is {log_end}, but ListOffsets(latest) says {latest} "
            f"and get_watermark_offsets(cached=False) says {high}")


def _check_timestamp_lookup(bootstrap: str, topic: str, timeout: float) -> str | None:
    base = int(time.time() * 1000) - 3_600_000
    timestamps = [base + i * 1000 for i in range(10)]
    offsets = _delivered_offsets(_produce(_producer(bootstrap), topic, [b"t"] * 10, timeout=timeout,
                                          timestamps=timestamps))
    expected = offsets[5]  # first record with timestamp >= base + 4500
    consumer = _consumer(bootstrap)
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=timeout)[0]
    finally:
        consumer.close()
    if found.error is None and found.offset == expected:
        return None
    return (f"offsets_for_times(ts of record {expected} - 500 ms) answered offset {found.offset}"
            f"{f' ({found.error})' if found.error else ''}, expected {expected}")


_SIZE_LIMIT = 10_000


def _check_max_message_bytes(bootstrap: str, topic: str, timeout: float) -> str | None:
    # topic was created with max.message.bytes=_SIZE_LIMIT (see _CHECKS)
    size = 5 * _SIZE_LIMIT
    err, offset = _produce(_producer(bootstrap), topic, [os.urandom(size)], timeout=timeout)[0]
    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return None
    if err is None:
        return (f"a {size}-byte record was accepted (offset {offset}) by a topic with "
                f"max.message.bytes={_SIZE_LIMIT}")
    return f"oversized record failed with {err.name()} instead of MSG_SIZE_TOO_LARGE"


def _check_delete_records(bootstrap: str, topic: str, timeout: float) -> str | None:
    _delivered_offsets(_produce(_producer(bootstrap), topic, [b"d"] * 10, timeout=timeout))
    tp = TopicPartition(topic, 0, 5)
    # A throwaway client: if the broker drops this connection, nothing else shares it.
    admin = admin_client(bootstrap, **{"socket.timeout.ms": int(timeout * 1000)})
    try:
        futures = admin.delete_records([tp], request_timeout=timeout, operation_timeout=timeout)
        result = futures[tp].result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        hint = " (the broker dropped the connection)" if err.code() == KafkaError._TRANSPORT else ""
        return f"delete_records failed with {err.name()}: {err.str()}{hint}"
    low = getattr(result, "low_watermark", None)
    return None if low == 5 else f"delete_records(before offset 5) reported low watermark {low}"


_CheckFn = Callable[[str, str, float], "str | None"]
#: capability -> (check, topic config)
_CHECKS: dict[str, tuple[_CheckFn, Mapping[str, str]]] = {
    "abort_isolation": (_check_abort_isolation, {}),
    "exact_high_watermark": (_check_exact_high_watermark, {}),
    "timestamp_lookup": (_check_timestamp_lookup, {}),
    "enforces_max_message_bytes": (_check_max_message_bytes, {"max.message.bytes": str(_SIZE_LIMIT)}),
    "delete_records": (_check_delete_records, {}),
}


# ----------------------------------------------------------------------------- runner
def _run_bounded(name: str, bootstrap: str, topic: str, timeout: float) -> Callable[[], str | None]:
    """Start check ``name`` in a daemon thread; return a function that joins it by the deadline."""
    check, config = _CHECKS[name]
    box: dict[str, str | None] = {}

    def target() -> None:
        try:
            create_topics(bootstrap, [topic], 1, config=config, timeout=timeout)
            box["reason"] = check(bootstrap, topic, timeout)
        except Exception as exc:  # noqa: BLE001 - any failure means "not shown to work"
            log.debug("capability check %s failed", name, exc_info=True)
            box["reason"] = f"probe failed: {type(exc).__name__}: {exc}"

    thread = threading.Thread(target=target, name=f"caps-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 2 * timeout + 2  # create + check, each bounded by timeout

    def join() -> str | None:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return f"probe timed out after {2 * timeout + 2:.0f}s"
        return box["reason"]

    return join


def _cluster_id(bootstrap: str, timeout: float) -> str | None:
    try:
        return admin_client(bootstrap).list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise BrokerProbeError(f"broker at {bootstrap} does not answer metadata requests: {exc}") from exc


def probe_capabilities(bootstrap: str, *, check_timeout: float = 5.0,
                       probe_delete_records: bool | None = None) -> BrokerCapabilities:
    """Measure the capabilities of the broker at ``bootstrap`` (takes about a second on Tansu).

    Checks run in parallel on throwaway topics that are deleted afterwards; ``delete_records``
    runs last and alone (see the module docstring for when it is sent at all). Raises
    ``BrokerProbeError`` if the broker is unreachable before, or stops answering after, probing.
    """
    started = time.monotonic()
    cluster_id = _cluster_id(bootstrap, check_timeout)
    is_tansu = "tansu" in (cluster_id or "").lower()
    run = uuid.uuid4().hex[:8]
    topics = {name: f"caps-probe-{run}-{name.replace('_', '-')}" for name in CAPABILITIES}
    reasons: dict[str, str | None] = {}
    try:
        joins = {name: _run_bounded(name, bootstrap, topics[name], check_timeout)
                 for name in CAPABILITIES if name != "delete_records"}
        reasons.update({name: join() for name, join in joins.items()})
        send = probe_delete_records if probe_delete_records is not None else not is_tansu
        if send:
            reasons["delete_records"] = _run_bounded("delete_records", bootstrap, topics["delete_records"],
                                                     check_timeout)()
            _cluster_id_after(bootstrap, check_timeout)
        else:
            reasons["delete_records"] = (TANSU_DELETE_RECORDS_REASON if is_tansu
                                         else "not probed: probe_delete_records=False")
    finally:
        try:
            delete_topics(bootstrap, topics.values(), timeout=check_timeout)
        except Exception:  # noqa: BLE001 - throwaway topics; never fail the probe over cleanup
            log.warning("could not delete capability probe topics %s", list(topics.values()), exc_info=True)
    caps = BrokerCapabilities(
        **{name: reasons[name] is None for name in CAPABILITIES},  # type: ignore[arg-type]
        reasons={name: reason for name, reason in reasons.items() if reason is not None},
        cluster_id=cluster_id, is_tansu=is_tansu, probe_seconds=time.monotonic() - started)
    log.info("%s", "\n".join(caps.summary_lines()))
    return caps


def _cluster_id_after(bootstrap: str, timeout: float) -> None:
    try:
        _cluster_id(bootstrap, timeout)
    except BrokerProbeError as exc:
        raise BrokerProbeError(f"broker stopped answering after the delete_records probe: {exc}") from exc

