"""Reprocess one partition of one tier: read due records, call the handler, route failures, commit.

This is the unit of work of every engine: the local engine runs it in-process, Spark runs it
in an executor task. It gives every drained record exactly one home (processed, a later tier,
a DLT, or a deliberate drop) before committing the offsets past it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Message, TopicPartition

from airflow_kafka_retry.engine.batches import BatchRunner
from airflow_kafka_retry.engine.clients import open_consumer, open_producer, partition_counts
from airflow_kafka_retry.engine.drain import PartitionReader
from airflow_kafka_retry.engine.loading import load_callable
from airflow_kafka_retry.engine.options import DrainOptions
from airflow_kafka_retry.engine.records import TierRecord
from airflow_kafka_retry.engine.route import RoutedRecord, Router, transactional_id
from airflow_kafka_retry.engine.summary import DeadLetter, PartitionSummary
from airflow_kafka_retry.errors import BatchFailedError, DeserializationError
from airflow_kafka_retry.policy.classify import class_path
from airflow_kafka_retry.policy.headers import (
    Failure,
    describe_exception,
    forward_headers,
    read_attempts,
    read_due_ms,
    read_original_timestamp,
)
from airflow_kafka_retry.policy.resolver import DestinationResolver, wall_clock_ms
from airflow_kafka_retry.policy.topology import Tier, Topology

log = logging.getLogger(__name__)


class _KeyDeserializationError(DeserializationError):
    """The key, not the value, failed to decode (written as the key-exception headers)."""


class PartitionJob:
    """Everything one partition run needs; :meth:`run` returns its summary and never raises.

    :param topology: the retry path.
    :param tier: the tier (or DLT) being drained.
    :param partition: the partition of ``tier.topic``.
    :param kafka_config: librdkafka configuration (bootstrap servers, security).
    :param options: handler and run options.
    :param cutoff_ms: records due later than this are left for a later run.
    :param clock: epoch milliseconds, used for due times of routed records.
    """

    def __init__(self, topology: Topology, tier: Tier, partition: int, kafka_config: Mapping[str, Any],
                 options: DrainOptions, *, cutoff_ms: int, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.topology = topology
        self.tier = tier
        self.partition = partition
        self.kafka_config = kafka_config
        self.options = options
        self.cutoff_ms = cutoff_ms
        self.clock = clock
        self.group = options.consumer_group or topology.consumer_group(tier)
        self.resolver = DestinationResolver(topology, clock=clock)
        self.summary = PartitionSummary(tier.topic, partition, self.group)

    def run(self) -> PartitionSummary:
        started = time.monotonic()
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported in the summary; the run fails on it
            self.summary.status = "failed"
            self.summary.error = f"{type(exc).__name__}: {exc}"
            log.error("%s[%s]: partition run failed: %s", self.tier.topic, self.partition, self.summary.error)
        self.summary.duration_s = round(time.monotonic() - started, 3)
        return self.summary

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        options = self.options
        handler = load_callable(options.handler, what="handler")
        self._value_decoder = load_callable(options.value_deserializer, what="value_deserializer") \
            if options.value_deserializer else None
        self._key_decoder = load_callable(options.key_deserializer, what="key_deserializer") \
            if options.key_deserializer else None
        runner = BatchRunner(handler, handler_name=options.handler, batch_size=options.batch_size,
                             max_extra_calls=options.max_extra_calls, in_place_attempts=options.in_place_attempts,
                             in_place_backoff_ms=options.in_place_backoff_ms,
                             max_attempts=None if self.tier.kind == "dlt" else self.topology.attempts,
                             retryable=self.topology.classifier.is_retryable)
        txn_id = transactional_id(options.transactional_id_prefix, self.group, self.tier.topic, self.partition) \
            if options.transactional else None
        with open_consumer(self.kafka_config, self.group) as consumer, \
                open_producer(self.kafka_config, txn_id) as producer:
            counts = partition_counts(consumer, [self.tier.topic, *self.topology.destinations_from(self.tier)])
            if self.partition >= counts[self.tier.topic]:
                raise ValueError(f"{self.tier.topic} has {counts[self.tier.topic]} partitions; "
                                 f"there is no partition {self.partition}")
            router = Router(producer, consumer, options.transactional, counts)
            router.start()  # fence earlier runs of this partition before reading its committed offset
            reader = PartitionReader(consumer, self.tier.topic, self.partition, cutoff_ms=self.cutoff_ms,
                                     idle_timeout_s=options.idle_timeout_s)
            self.summary.start_offset = reader.start_offset if reader.start_offset >= 0 else None
            left = options.max_records
            while True:
                limit = options.chunk_size if left is None else min(options.chunk_size, left)
                chunk = reader.read(limit)
                if chunk.messages:
                    self._process(chunk.messages, runner, router)
                    self.summary.committed_offset = chunk.next_offset
                self.summary.stop_reason = chunk.stop
                self.summary.next_due_ms = chunk.not_due_ms
                if left is not None:
                    left -= len(chunk.messages)
                if chunk.stop != "limit" or left == 0:
                    break

    def _process(self, messages: list[Message], runner: BatchRunner, router: Router) -> None:
        records: list[TierRecord] = []
        source_of: dict[int, Message] = {}
        failures: list[tuple[Message, BaseException, int]] = []
        for message in messages:
            try:
                record = self._record(message)
            except DeserializationError as exc:
                failures.append((message, exc, read_attempts(message.headers())))
                continue
            records.append(record)
            source_of[id(record)] = message
        calls_before, extra_before = runner.stats.handler_calls, runner.stats.extra_calls
        succeeded = 0
        for outcome in runner.run(records):
            if outcome.failed:
                error = outcome.error
                if isinstance(error, BatchFailedError) and error.cause is not None:
                    error = error.cause
                failures.append((source_of[id(outcome.record)], error, outcome.record.attempt + outcome.tries - 1))
            else:
                succeeded += 1
        routed, dropped = self._route(failures)
        router.commit(TopicPartition(self.tier.topic, self.partition, messages[-1].offset() + 1), routed)
        self._count(messages, succeeded, routed, dropped, runner, calls_before, extra_before)

    def _record(self, message: Message) -> TierRecord:
        raw_key, raw_value, headers = message.key(), message.value(), tuple(message.headers() or ())
        key, value = raw_key, raw_value
        where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
        if self._key_decoder is not None and raw_key is not None:
            try:
                key = self._key_decoder(raw_key)
            except Exception as exc:  # noqa: BLE001 - any decoding failure is fatal for the record
                raise _KeyDeserializationError(f"cannot decode the key of {where}: {type(exc).__name__}: {exc}") \
                    from exc
        if self._value_decoder is not None and raw_value is not None:
            try:
                value = self._value_decoder(raw_value)
            except Exception as exc:  # noqa: BLE001
                raise DeserializationError(f"cannot decode the value of {where}: {type(exc).__name__}: {exc}") \
                    from exc
        ts_type, ts = message.timestamp()
        return TierRecord(key=key, value=value, headers=headers, topic=message.topic(),
                          partition=message.partition(), offset=message.offset(), timestamp_ms=ts,
                          timestamp_type=ts_type, attempt=read_attempts(headers), due_ms=read_due_ms(headers),
                          raw_key=raw_key, raw_value=raw_value)

    def _route(self, failures: list[tuple[Message, BaseException, int]]) -> tuple[list[RoutedRecord], list[DeadLetter]]:
        routed: list[RoutedRecord] = []
        dropped: list[DeadLetter] = []
        for message, error, attempt in failures:
            ts_type, ts = message.timestamp()
            if ts < 0:
                ts = self.clock()
            destination = self.resolver.resolve(
                topic=message.topic(), partition=message.partition(), attempt=attempt, exception=error,
                original_timestamp_ms=read_original_timestamp(message.headers(), ts))
            if destination.action == "drop":
                log.warning("%s[%s]@%s: %s failed (%s) and is dropped (%s)", message.topic(), message.partition(),
                            message.offset(), class_path(type(error)), destination.reason,
                            self.topology.dlt_strategy)
                dropped.append(DeadLetter(message.topic(), message.partition(), message.offset(),
                                          class_path(type(error)), destination.reason))
                continue
            info = describe_exception(error, include_stacktrace=self.topology.headers.include_stacktrace,
                                      key=isinstance(error, _KeyDeserializationError),
                                      cause_rule=self.topology.headers.cause)
            failure = Failure(topic=message.topic(), partition=message.partition(), offset=message.offset(),
                              timestamp_ms=ts, timestamp_type=ts_type, consumer_group=self.topology.group_id,
                              next_attempt=destination.next_attempt, due_ms=destination.due_ms, exception=info)
            headers = forward_headers(message.headers(), failure, self.topology.headers)
            routed.append(RoutedRecord(message, destination, headers, info.fqcn))
        return routed, dropped

    def _count(self, messages: list[Message], succeeded: int, routed: list[RoutedRecord],
               dropped: list[DeadLetter], runner: BatchRunner, calls_before: int, extra_before: int) -> None:
        s = self.summary
        if s.first_offset is None:
            s.first_offset = messages[0].offset()
        s.last_offset = messages[-1].offset()
        s.drained += len(messages)
        s.succeeded += succeeded
        s.transactions += 1 if self.options.transactional else 0
        s.handler_calls += runner.stats.handler_calls - calls_before
        s.extra_handler_calls += runner.stats.extra_calls - extra_before
        cap = self.options.dead_letter_cap
        for item in routed:
            dest = item.destination
            s.count_route(dest.topic)
            if dest.action == "dlt":
                src = item.source
                s.count_dead_letter(DeadLetter(src.topic(), src.partition(), src.offset(), item.exception, dest.reason,
                                               dest.topic, item.delivered_partition, item.delivered_offset), cap)
        for letter in dropped:
            s.dropped += 1
            s.count_dead_letter(letter, cap)
