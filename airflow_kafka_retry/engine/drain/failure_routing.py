"""
What happens to a consumed record: decoded for the handler, and, when it fails, where it goes next.

:func:`decode_record` applies the run's key and value deserializers. :class:`FailureRouting` gives each
failed record its home (the destination resolver: a later tier, a DLT, parking, or a drop) and the
headers it is forwarded with, held to the topology's header budget unless the record's own headers
alone exceed it. A record whose replay headers the replay log does not confirm is dead-lettered like
any other; the first of a partition run is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.drain.records import TierRecord, make_record
from airflow_kafka_retry.engine.drain.summary import DeadLetter
from airflow_kafka_retry.engine.drain.transaction import RoutedRecord
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of, partition_of, topic_of
from airflow_kafka_retry.errors import DeserializationError
from airflow_kafka_retry.policy.classify import class_path
from airflow_kafka_retry.policy.headers.codec import Header, last_header, read_original_timestamp
from airflow_kafka_retry.policy.headers.failure import (
    Failure,
    HeaderBudgetError,
    describe_exception,
    forward_headers,
    header_bytes,
)
from airflow_kafka_retry.policy.headers.replay import REPLAY_ID

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
    from airflow_kafka_retry.policy.topology.model import Topology

log = logging.getLogger(__name__)


class KeyDeserializationError(DeserializationError):
    """The key, not the value, failed to decode (written as the key-exception headers)."""


def claimed_id(message: Message) -> str:
    """The claimed replay id, shortened and printable (it is anyone's input)."""
    raw = last_header(headers_of(message), REPLAY_ID) or b""
    text = raw[:64].decode("utf-8", errors="replace")
    return "replay id " + repr("".join(c if c.isprintable() else "?" for c in text))


def decode_record(
    message: Message,
    headers: list[Header] | None,
    attempt: int,
    due: int | None,
    key_decoder: Callable[[bytes], Any] | None,
    value_decoder: Callable[[bytes], Any] | None,
) -> TierRecord:
    """The record the handler sees, key and value decoded; a DeserializationError says which failed."""
    raw_key, raw_value = message.key(), message.value()
    key, value = raw_key, raw_value
    where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
    if key_decoder is not None and raw_key is not None:
        try:
            key = key_decoder(raw_key)
        except Exception as exc:  # any decoding failure is fatal for the record
            raise KeyDeserializationError(
                f"cannot decode the key of {where}: {type(exc).__name__}: {exc}"
            ) from exc
    if value_decoder is not None and raw_value is not None:
        try:
            value = value_decoder(raw_value)
        except Exception as exc:
            raise DeserializationError(
                f"cannot decode the value of {where}: {type(exc).__name__}: {exc}"
            ) from exc
    ts_type, ts = message.timestamp()
    return make_record(
        key,
        value,
        tuple(headers) if headers else (),
        topic_of(message),
        partition_of(message),
        offset_of(message),
        ts,
        ts_type,
        attempt,
        due,
        raw_key,
        raw_value,
    )


class FailureRouting:
    """Where the failed records of a partition run go, and with which headers."""

    def __init__(self, topology: Topology, resolver: DestinationResolver, clock: Callable[[], int]) -> None:
        self.topology = topology
        self.resolver = resolver
        self.clock = clock

    def route(
        self,
        failures: list[tuple[Message, BaseException, int]],
        seen_untrusted: int,
        headers: Sequence[list[Header] | None] | None = None,
    ) -> tuple[list[RoutedRecord], list[DeadLetter], int]:
        """
        Each failed record's home: routed (with its forwarded headers) or dropped.

        Also the number of records whose replay headers were ignored; ``seen_untrusted`` is how many the
        partition run counted before (the first of a run is logged). ``headers[i]``, when given, stands for
        the headers of ``failures[i]``'s record (a share-group dead letter with its original coordinates).
        """
        untrusted = 0
        routed: list[RoutedRecord] = []
        dropped: list[DeadLetter] = []
        for index, (message, error, attempt) in enumerate(failures):
            own = headers[index] if headers is not None else headers_of(message)
            ts_type, ts = message.timestamp()
            if ts < 0:
                ts = self.clock()
            destination = self.resolver.resolve(
                topic=topic_of(message),
                partition=partition_of(message),
                attempt=attempt,
                exception=error,
                original_timestamp_ms=read_original_timestamp(own, ts),
                headers=own,
                key=message.key(),
                value=message.value(),
            )
            if destination.untrusted_replay:
                self._untrusted_replay(message, seen_untrusted + untrusted)
                untrusted += 1
            if destination.action == "drop":
                log.warning(
                    "%s[%s]@%s: %s failed (%s) and is dropped (%s)",
                    message.topic(),
                    message.partition(),
                    message.offset(),
                    class_path(type(error)),
                    destination.reason,
                    self.topology.dlt_strategy,
                )
                dropped.append(
                    DeadLetter(
                        topic_of(message),
                        partition_of(message),
                        offset_of(message),
                        class_path(type(error)),
                        destination.reason,
                    )
                )
                continue
            info = describe_exception(
                error,
                include_stacktrace=self.topology.headers.include_stacktrace,
                key=isinstance(error, KeyDeserializationError),
                cause_rule=self.topology.headers.cause,
            )
            failure = Failure(
                topic=topic_of(message),
                partition=partition_of(message),
                offset=offset_of(message),
                timestamp_ms=ts,
                timestamp_type=ts_type,
                consumer_group=self.topology.group_id,
                next_attempt=destination.next_attempt,
                due_ms=destination.due_ms,
                exception=info,
            )
            routed.append(
                RoutedRecord(message, destination, self._forward_headers(message, own, failure), info.fqcn)
            )
        return routed, dropped, untrusted

    @staticmethod
    def _untrusted_replay(message: Message, seen: int) -> None:
        """A record whose replay headers were ignored: the first of a partition run is logged."""
        if not seen:
            log.warning(
                "%s[%s]@%s: ignored its replay headers (%s): no replay of this topology's DLTs or parking "
                "topic moved it, so it is dead-lettered like any other record; further ones in this run "
                "are only counted (tier.untrusted_replay_headers)",
                message.topic(),
                message.partition(),
                message.offset(),
                claimed_id(message),
            )

    def _forward_headers(self, message: Message, own: list[Header] | None, failure: Failure) -> list[Header]:
        policy = self.topology.headers
        try:
            return forward_headers(own, failure, policy)
        except HeaderBudgetError:
            # The record's own headers alone exceed the budget (it arrived that way): it keeps every
            # one of them (headers are never dropped) and still gets its home; only the headers the
            # engine writes are held to the budget.
            size = header_bytes(own or ())
            log.warning(
                "%s[%s]@%s: the record's own headers take %s bytes, more than headers.max_header_bytes "
                "(%s); routed with them all",
                message.topic(),
                message.partition(),
                message.offset(),
                size,
                policy.max_header_bytes,
            )
            return forward_headers(
                own, failure, replace(policy, max_header_bytes=policy.max_header_bytes + size)
            )
