"""
Measure, once per test run, which Kafka behaviours the broker under test really has.

Tests that depend on one of these behaviours are skipped (with the reason) on brokers that lack
it, instead of passing by accident; the same tests run in full against real Kafka. Every check
uses its own explicitly created topic (one partition, except where a check needs more) and runs in
its own daemon thread with a deadline. A check that *measures* the behaviour missing returns the
reason; a check that raises or overruns its deadline has measured nothing, so the probe fails
(``CapabilityProbeError``) instead of reporting the capability missing, which would only skip tests.

Against an external cluster (real Kafka) every capability is expected: ``check_expected`` turns one
measured missing into ``MissingCapabilityError`` (see ``expected_capabilities``).

``concurrent_txn_offset_commits``: several transactional producers (one per source partition, as
the engine's parallel partition jobs are) commit offsets of one consumer group at the same time,
each transaction also writing a record to one shared output partition. After every round, once
every ``commit_transaction`` has returned, each partition's committed offset must be the one just
committed. On Tansu 0.6 it is not: a transactional offset commit whose records share a partition
with another producer's still-open transaction is held back (returned as committed, not stored)
until that transaction ends, and concurrent commits of such transactions occasionally lose an
update for good. The first round runs while another producer's transaction on the shared
partition is open, which shows the hold-back on every run; the later rounds stress the race.

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

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from airflow_kafka_retry.testing.topics import CLIENT_LOGGER, admin_client, create_topics, delete_topics

log = logging.getLogger(__name__)

#: Names of the boolean capability fields, in probe order.
CAPABILITIES: tuple[str, ...] = (
    "abort_isolation",
    "exact_high_watermark",
    "timestamp_lookup",
    "enforces_max_message_bytes",
    "concurrent_txn_offset_commits",
    "offsets_only_transactions",
    "commit_metadata",
    "delete_records",
)

TANSU_DELETE_RECORDS_REASON = (
    "not probed: DeleteRecords is known to crash Tansu's connection task (not implemented in Tansu 0.6)"
)


#: Names the capabilities a broker under ``KAFKA_BOOTSTRAP_SERVERS`` must have (comma-separated, ``all`` or
#: ``none``); without it, an external cluster must have all of them (real Kafka does).
EXPECTED_ENV = "KAFKA_EXPECTED_CAPABILITIES"


class BrokerProbeError(RuntimeError):
    """The broker could not be reached, or stopped answering after the probes."""


class CapabilityProbeError(BrokerProbeError):
    """A capability check raised or overran its deadline: it measured nothing, so no test may skip on it."""


class MissingCapabilityError(BrokerProbeError):
    """The broker lacks a capability it is expected to have (real Kafka has every one)."""


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
    concurrent_txn_offset_commits: bool = False
    """Offsets committed for one group by concurrent transactional producers (different
    ``transactional.id``) are all stored once ``commit_transaction`` returns: none is lost or held back."""
    offsets_only_transactions: bool = False
    """A transaction that commits consumer offsets but produces no record stores those offsets
    (the engine commits such a transaction for every chunk in which no record failed)."""
    commit_metadata: bool = False
    """An offset commit's metadata string is stored and returned by ``committed()`` (the DLT watch keeps
    its admitted metric tags there)."""
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
        lines = [
            (
                f"broker capabilities ({kind}, cluster id {self.cluster_id!r}, "
                f"probed in {self.probe_seconds:.1f}s):"
            )
        ]
        for name in CAPABILITIES:
            if getattr(self, name):
                lines.append(f"  {name}: yes")
            else:
                lines.append(f"  {name}: NO - {self.reasons.get(name, 'no reason recorded')}")
        return lines


def _check_name(name: str) -> None:
    if name not in CAPABILITIES:
        raise ValueError(f"unknown broker capability {name!r}; known: {', '.join(CAPABILITIES)}")


def expected_capabilities(*, external: bool, setting: str | None) -> tuple[str, ...]:
    """
    The capabilities the broker under test must have.

    ``setting`` is ``KAFKA_EXPECTED_CAPABILITIES`` (``None`` when unset): ``all``, ``none`` or a
    comma-separated list of names. Unset, an external cluster (``external``) is taken for real Kafka
    and must have every capability; the embedded Tansu broker need have none (tests skip instead).
    """
    if setting is None or not setting.strip():
        return CAPABILITIES if external else ()
    value = setting.strip().lower()
    if value == "all":
        return CAPABILITIES
    if value == "none":
        return ()
    names = tuple(n.strip() for n in setting.split(",") if n.strip())
    unknown = [n for n in names if n not in CAPABILITIES]
    if unknown:
        raise ValueError(
            f"{EXPECTED_ENV}: unknown broker capability {', '.join(map(repr, unknown))}; "
            f"use all, none or names from: {', '.join(CAPABILITIES)}"
        )
    return names


def check_expected(caps: BrokerCapabilities, expected: tuple[str, ...], *, broker: str) -> None:
    """``MissingCapabilityError`` naming each capability in ``expected`` that ``caps`` lacks, and why."""
    lacking = {name: reason for name, reason in caps.missing().items() if name in expected}
    if lacking:
        listed = "; ".join(f"{name}: {reason}" for name, reason in lacking.items())
        raise MissingCapabilityError(
            f"broker {broker} lacks {len(lacking)} capability(ies) expected of it ({listed}). Real Kafka has "
            f"every one, so tests needing them would be skipped, not run. If this broker is not real Kafka, "
            f"set {EXPECTED_ENV} to the capabilities it must have (comma-separated, or none)."
        )


def missing_reason(caps: BrokerCapabilities, name: str) -> str | None:
    """``None`` if ``caps`` has ``name``, else a skip message naming the capability and why it is missing."""
    if caps.has(name):
        return None
    return f"broker lacks capability {name!r}: {caps.reasons.get(name, 'no reason recorded')}"


# ----------------------------------------------------------------------------- client helpers
_SESSION_TIMEOUT_MS = "6000"


def _producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOGGER,
        "linger.ms": 20,
        "message.timeout.ms": 5000,
    }
    conf.update(extra)
    return Producer(conf)


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOGGER,
        "group.id": f"caps-probe-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": _SESSION_TIMEOUT_MS,
    }
    conf.update(extra)
    return Consumer(conf)


def _produce(
    producer: Producer,
    topic: str,
    values: list[bytes],
    *,
    timeout: float,
    timestamps: list[int] | None = None,
) -> list[tuple[KafkaError | None, int]]:
    """Produce to partition 0, flush, return ``(error, offset)`` per record in order."""
    results: list[tuple[KafkaError | None, int]] = [(None, -1)] * len(values)

    def report(i: int) -> Callable[[KafkaError | None, Message], None]:
        def cb(err: KafkaError | None, msg: Message) -> None:
            offset = msg.offset() if err is None else None
            results[i] = (err, offset if offset is not None else -1)

        return cb

    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps is not None else 0  # 0: librdkafka stamps the time
        producer.produce(topic, value=value, partition=0, on_delivery=report(i), timestamp=timestamp)
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
    aborted = values.count(b"aborted")
    if aborted:
        return f"read_committed consumer saw {aborted} of 3 records of an aborted transaction"
    return None


def _read_to_eof(consumer: Consumer, *, until: bytes, timeout: float) -> list[bytes]:
    """Values read until partition EOF after ``until`` was seen; ``TimeoutError`` at the deadline."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if until in values:
                    return values
                continue
            raise KafkaException(error)
        value = msg.value()
        if value is not None:
            values.append(value)
    raise TimeoutError(
        f"did not read {until!r} and then the partition end within {timeout:.0f}s "
        f"({len(values)} record(s) read)"
    )


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
    return (
        f"after 3 batches of 5 records the log end is {log_end}, but ListOffsets(latest) says {latest} "
        f"and get_watermark_offsets(cached=False) says {high}"
    )


def _check_timestamp_lookup(bootstrap: str, topic: str, timeout: float) -> str | None:
    base = int(time.time() * 1000) - 3_600_000
    timestamps = [base + i * 1000 for i in range(10)]
    offsets = _delivered_offsets(
        _produce(_producer(bootstrap), topic, [b"t"] * 10, timeout=timeout, timestamps=timestamps)
    )
    expected = offsets[5]  # first record with timestamp >= base + 4500
    consumer = _consumer(bootstrap)
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=timeout)[0]
    finally:
        consumer.close()
    if found.error is None and found.offset == expected:
        return None
    return (
        f"offsets_for_times(ts of record {expected} - 500 ms) answered offset {found.offset}"
        f"{f' ({found.error})' if found.error else ''}, expected {expected}"
    )


_SIZE_LIMIT = 10_000


def _check_max_message_bytes(bootstrap: str, topic: str, timeout: float) -> str | None:
    # topic was created with max.message.bytes=_SIZE_LIMIT (see _CHECKS)
    size = 5 * _SIZE_LIMIT
    err, offset = _produce(_producer(bootstrap), topic, [os.urandom(size)], timeout=timeout)[0]
    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return None
    if err is None:
        return (
            f"a {size}-byte record was accepted (offset {offset}) by a topic with "
            f"max.message.bytes={_SIZE_LIMIT}"
        )
    return f"oversized record failed with {err.name()} instead of MSG_SIZE_TOO_LARGE"


def _check_commit_metadata(bootstrap: str, topic: str, timeout: float) -> str | None:
    consumer = _consumer(bootstrap)
    try:
        stored = '{"probe":1}'
        consumer.commit(offsets=[TopicPartition(topic, 0, 0, metadata=stored)], asynchronous=False)
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=timeout)
        if found.metadata != stored:
            return f"committed metadata {stored!r}, read back {found.metadata!r}"
        return None
    finally:
        consumer.close()


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


#: Concurrent transactional producers in the offset-commit check; each commits offsets of its own
#: partition (0 .. _TXN_PRODUCERS - 1) and writes one record per transaction to partition _TXN_PRODUCERS.
_TXN_PRODUCERS = 4
#: At most this many rounds (one transaction per producer each) ...
_TXN_ROUNDS = 50
#: ... and no new round after this many seconds of rounds.
_TXN_ROUNDS_SECONDS = 1.0
#: How long a stale committed offset may take to turn into the committed one before it counts as lost.
#: librdkafka's ``committed()`` already waits out UNSTABLE_OFFSET_COMMIT (transaction markers not yet
#: written) on real Kafka; this is a further margin, spent only when something is wrong.
_TXN_SETTLE_SECONDS = 1.0


def _check_concurrent_txn_offset_commits(bootstrap: str, topic: str, timeout: float) -> str | None:
    """
    Rounds of simultaneous transactions.

    In round ``n`` producer ``i`` commits offset ``n`` of partition ``i``.

    ``topic`` has ``_TXN_PRODUCERS + 1`` partitions; every transaction also writes one record to the
    last one. Round 1 runs while one more transactional producer holds open a transaction that has
    written to that partition (it commits after the round is checked); later rounds run alone. After
    each round, once every producer's ``commit_transaction`` has returned, a separate client reads
    the group's committed offsets.
    """
    shared = _TXN_PRODUCERS
    group = f"{topic}-group"
    # start/done: the producers and this thread; ready: the producers, so that they commit together
    start = threading.Barrier(_TXN_PRODUCERS + 1, timeout=timeout)
    ready = threading.Barrier(_TXN_PRODUCERS, timeout=timeout)
    done = threading.Barrier(_TXN_PRODUCERS + 1, timeout=timeout)
    stop = threading.Event()
    current_round = [0]
    errors: list[BaseException] = []

    def producer_loop(index: int) -> None:
        producer: Producer | None = None
        consumer: Consumer | None = None
        in_txn = False
        try:
            producer = _producer(bootstrap, **{"transactional.id": f"{topic}-tx-{index}", "linger.ms": 0})
            consumer = _consumer(
                bootstrap, **{"group.id": group}
            )  # never subscribes: supplies the group metadata
            producer.init_transactions(timeout)
            metadata = consumer.consumer_group_metadata()
            while True:
                start.wait()
                if stop.is_set():
                    return
                offset = current_round[0]
                producer.begin_transaction()
                in_txn = True
                producer.produce(topic, value=b"%d@%d" % (index, offset), partition=shared)
                producer.send_offsets_to_transaction(
                    [TopicPartition(topic, index, offset)], metadata, timeout
                )
                ready.wait()
                producer.commit_transaction(timeout)
                in_txn = False
                done.wait()
        except threading.BrokenBarrierError:
            pass  # the checking thread stopped the rounds, or another producer failed (and said why)
        except BaseException as exc:  # reported by the checking thread
            errors.append(exc)
        finally:
            for barrier in (start, ready, done):
                barrier.abort()  # nobody waits for a producer that has left
            if in_txn and producer is not None:
                try:
                    producer.abort_transaction(timeout)
                except KafkaException:
                    log.debug("could not abort the probe transaction of producer %s", index, exc_info=True)
            if consumer is not None:
                consumer.close()

    def wait(barrier: threading.Barrier, what: str) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            if errors:
                raise errors[0] from None
            raise TimeoutError(
                f"{_TXN_PRODUCERS} transactional producers did not {what} within {timeout:.0f}s"
            ) from None

    threads = [
        threading.Thread(target=producer_loop, args=(i,), name=f"caps-txn-{i}", daemon=True)
        for i in range(_TXN_PRODUCERS)
    ]
    for thread in threads:
        thread.start()
    holder = _producer(bootstrap, **{"transactional.id": f"{topic}-tx-open", "linger.ms": 0})
    reader = _consumer(bootstrap, **{"group.id": group})
    holder_open = False
    try:
        holder.init_transactions(timeout)
        holder.begin_transaction()
        holder_open = True
        _delivered_offsets(_produce_to(holder, topic, shared, b"open", timeout=timeout))
        rounds_until: float | None = None
        for offset in range(1, _TXN_ROUNDS + 1):
            current_round[0] = offset
            wait(start, "start a round")
            wait(done, "commit a round")
            stale = _stale_committed(reader, topic, dict.fromkeys(range(_TXN_PRODUCERS), offset), timeout)
            if stale:
                p, committed, found = stale[0]
                when = (
                    "while another producer's transaction on the same output partition was open"
                    if holder_open
                    else f"(round {offset})"
                )
                return (
                    f"concurrent transactional offset commits to one group lose updates (partition {p} "
                    f"committed at {committed}, read back {_shown(found)}; {len(stale)} of {_TXN_PRODUCERS} "
                    f"partitions stale after {_TXN_PRODUCERS} producers committed at once {when})"
                )
            if holder_open:
                holder.commit_transaction(timeout)
                holder_open = False
                rounds_until = time.monotonic() + _TXN_ROUNDS_SECONDS
            elif rounds_until is not None and time.monotonic() >= rounds_until:
                break
        return None
    finally:
        stop.set()
        start.abort()  # releases the producers waiting for the next round
        for thread in threads:
            thread.join(timeout)
        if holder_open:
            try:
                holder.abort_transaction(timeout)
            except KafkaException:
                log.debug("could not abort the probe's open transaction", exc_info=True)
        reader.close()


def _produce_to(
    producer: Producer, topic: str, partition: int, value: bytes, *, timeout: float
) -> list[tuple[KafkaError | None, int]]:
    """Produce one record to ``partition`` and flush (inside or outside a transaction)."""
    results: list[tuple[KafkaError | None, int]] = [(None, -1)]

    def cb(err: KafkaError | None, msg: object) -> None:
        results[0] = (err, msg.offset() if err is None else -1)  # type: ignore[attr-defined]

    producer.produce(topic, value=value, partition=partition, on_delivery=cb)
    if producer.flush(timeout):
        raise TimeoutError(f"record to {topic}[{partition}] not delivered within {timeout:.0f}s")
    return results


def _stale_committed(
    reader: Consumer, topic: str, expected: Mapping[int, int], timeout: float
) -> list[tuple[int, int, int | None]]:
    """
    Partitions whose committed offset is still not the expected one after re-reading.

    ``[(partition, expected, found)]``, after ``_TXN_SETTLE_SECONDS`` of re-reading (``found`` is None when
    the read failed).
    """
    deadline = time.monotonic() + _TXN_SETTLE_SECONDS
    while True:
        error: KafkaException | None = None
        found: dict[int, int | None] = {}
        try:
            for tp in reader.committed([TopicPartition(topic, p) for p in expected], timeout=timeout):
                found[tp.partition] = tp.offset if tp.error is None else None
        except KafkaException as exc:
            error = exc
        stale = [
            (p, offset, found.get(p)) for p, offset in sorted(expected.items()) if found.get(p) != offset
        ]
        if not stale:
            return []
        if time.monotonic() >= deadline:
            if error is not None:
                raise error
            unreadable = [p for p, _, offset in stale if offset is None]
            if unreadable:  # an error measures nothing: not a lost update
                raise RuntimeError(f"committed offsets of {topic} partition(s) {unreadable} are unreadable")
            return stale
        time.sleep(0.05)


def _shown(offset: int | None) -> str:
    if offset is None:
        return "an error"
    return "no committed offset" if offset < 0 else str(offset)


def _check_offsets_only_transactions(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = _producer(bootstrap, **{"transactional.id": f"{topic}-tx"})
    producer.init_transactions(timeout)
    group_member = _consumer(bootstrap)
    group = group_member.consumer_group_metadata()
    try:
        for offset, with_record in ((1, True), (2, False), (3, False)):
            producer.begin_transaction()
            if with_record:
                producer.produce(topic, value=b"x", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], group, timeout)
            producer.commit_transaction(timeout)
            stored = _committed_offset(group_member, topic, timeout)
            if stored != offset:
                kind = "with a record" if with_record else "with offsets only"
                return (
                    f"a transaction {kind} committed offset {offset} and returned success, but the group's "
                    f"committed offset reads back as {_shown(stored)}"
                )
        return None
    finally:
        group_member.close()


def _committed_offset(member: Consumer, topic: str, timeout: float) -> int:
    """The group's committed offset of partition 0 (negative: none); an error raises, never "missing"."""
    [tp] = member.committed([TopicPartition(topic, 0)], timeout=timeout)
    if tp.error is not None:
        raise KafkaException(tp.error)
    return tp.offset


_CheckFn = Callable[[str, str, float], "str | None"]
#: capability -> (check, topic config, partitions of its topic)
_CHECKS: dict[str, tuple[_CheckFn, Mapping[str, str], int]] = {
    "abort_isolation": (_check_abort_isolation, {}, 1),
    "exact_high_watermark": (_check_exact_high_watermark, {}, 1),
    "timestamp_lookup": (_check_timestamp_lookup, {}, 1),
    "enforces_max_message_bytes": (_check_max_message_bytes, {"max.message.bytes": str(_SIZE_LIMIT)}, 1),
    "concurrent_txn_offset_commits": (_check_concurrent_txn_offset_commits, {}, _TXN_PRODUCERS + 1),
    "offsets_only_transactions": (_check_offsets_only_transactions, {}, 1),
    "commit_metadata": (_check_commit_metadata, {}, 1),
    "delete_records": (_check_delete_records, {}, 1),
}


# ----------------------------------------------------------------------------- runner
#: What a finished check gives: (reason the capability is missing or None, error that kept it from measuring).
_Outcome = tuple["str | None", "str | None"]


def _run_bounded(name: str, bootstrap: str, topic: str, timeout: float) -> Callable[[], _Outcome]:
    """Start check ``name`` in a daemon thread; return a function that joins it by the deadline."""
    check, config, partitions = _CHECKS[name]
    box: dict[str, _Outcome] = {}

    def target() -> None:
        try:
            create_topics(bootstrap, [topic], partitions, config=config, timeout=timeout)
            box["outcome"] = (check(bootstrap, topic, timeout), None)
        except Exception as exc:  # reported as the probe's error, never as "missing"
            log.debug("capability check %s failed", name, exc_info=True)
            box["outcome"] = (None, f"raised {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=target, name=f"caps-{name}", daemon=True)
    thread.start()
    limit = 2 * timeout + 2  # create + check, each bounded by timeout
    deadline = time.monotonic() + limit

    def join() -> _Outcome:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return None, f"did not finish within {limit:.1f}s"
        return box["outcome"]

    return join


def _cluster_id(bootstrap: str, timeout: float) -> str | None:
    try:
        return admin_client(bootstrap).list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise BrokerProbeError(f"broker at {bootstrap} does not answer metadata requests: {exc}") from exc


def probe_capabilities(
    bootstrap: str, *, check_timeout: float = 5.0, probe_delete_records: bool | None = None
) -> BrokerCapabilities:
    """
    Measure the capabilities of the broker at ``bootstrap`` (takes about 1.5 s on Tansu).

    Checks run in parallel on throwaway topics that are deleted afterwards; ``delete_records``
    runs last and alone (see the module docstring for when it is sent at all). Raises
    ``BrokerProbeError`` if the broker is unreachable before, or stops answering after, probing,
    and ``CapabilityProbeError`` naming every check that raised or overran its deadline.
    """
    started = time.monotonic()
    cluster_id = _cluster_id(bootstrap, check_timeout)
    is_tansu = "tansu" in (cluster_id or "").lower()
    run = uuid.uuid4().hex[:8]
    topics = {name: f"caps-probe-{run}-{name.replace('_', '-')}" for name in CAPABILITIES}
    reasons: dict[str, str | None] = {}
    errors: dict[str, str] = {}

    def record(name: str, outcome: _Outcome) -> None:
        reasons[name], error = outcome
        if error is not None:
            errors[name] = error

    try:
        joins = {
            name: _run_bounded(name, bootstrap, topics[name], check_timeout)
            for name in CAPABILITIES
            if name != "delete_records"
        }
        for name, join in joins.items():
            record(name, join())
        send = probe_delete_records if probe_delete_records is not None else not is_tansu
        if send:
            record(
                "delete_records",
                _run_bounded("delete_records", bootstrap, topics["delete_records"], check_timeout)(),
            )
            _cluster_id_after(bootstrap, check_timeout)
        else:
            reasons["delete_records"] = (
                TANSU_DELETE_RECORDS_REASON if is_tansu else "not probed: probe_delete_records=False"
            )
    finally:
        try:
            delete_topics(bootstrap, topics.values(), timeout=check_timeout)
        except Exception:  # throwaway topics; never fail the probe over cleanup
            log.warning("could not delete capability probe topics %s", list(topics.values()), exc_info=True)
    if errors:
        listed = "; ".join(f"{name} {error}" for name, error in errors.items())
        raise CapabilityProbeError(
            f"capability check(s) of the broker at {bootstrap} measured nothing: {listed}. A check that "
            "errs is not a missing capability (that would skip the tests needing it); fix the broker or the "
            "check."
        )
    caps = BrokerCapabilities(
        **{name: reasons[name] is None for name in CAPABILITIES},
        reasons={name: reason for name, reason in reasons.items() if reason is not None},
        cluster_id=cluster_id,
        is_tansu=is_tansu,
        probe_seconds=time.monotonic() - started,
    )
    log.info("%s", "\n".join(caps.summary_lines()))
    return caps


def _cluster_id_after(bootstrap: str, timeout: float) -> None:
    try:
        _cluster_id(bootstrap, timeout)
    except BrokerProbeError as exc:
        raise BrokerProbeError(f"broker stopped answering after the delete_records probe: {exc}") from exc
