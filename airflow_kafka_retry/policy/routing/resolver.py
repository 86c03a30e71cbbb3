"""
Destination resolution, like Spring's ``DefaultDestinationTopicResolver``.

(topology, source topic, attempt, exception, original timestamp, headers, clock) -> where the failed
record goes next and when it is due there; a record replayed from a DLT goes to the parking topic
instead of a DLT. Pure: the clock and the replay-log check are injected, nothing is produced here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.policy.headers.replay import claimed_replay, copy_digest, is_replayed
from airflow_kafka_retry.policy.routing.share_redelivery import NotRedeliverableError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.codec import Header
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

Action = Literal["retry", "dlt", "drop", "redeliver"]
Reason = Literal[
    "retryable",  # retry tier
    "not_retryable",  # fatal classification, straight to the DLT
    "exhausted",  # no attempts (or tiers) left
    "timeout",  # older than the topology's timeout
    "dlt_failure_retried",  # failed while reprocessing the DLT: back to the DLT (always_retry_on_error)
    "dlt_failure_dropped",  # failed while reprocessing the DLT: given up (fail_on_error, or fatal)
    "no_dlt",  # would go to a DLT, but the topology has none
]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Destination:
    """
    Where a failed record goes.

    :param action: ``retry`` (a retry tier), ``dlt`` (a dead-letter topic), ``drop`` (no home
        on Kafka by design: ``no_dlt`` or a failed DLT reprocessing under ``fail_on_error``) or
        ``redeliver`` (a due record back to its share group's source topic:
        ``policy/routing/share_redelivery.py``).
    :param topic: destination topic, None for ``drop``.
    :param partition: destination partition (the source partition, as Spring does by default).
    :param next_attempt: the ``retry_topic-attempts`` value the routed record carries.
    :param due_ms: when it is due at the destination (``retry_topic-backoff-timestamp``).
    :param reason: why this destination was chosen.
    :param parked: the record was replayed from a DLT and failed again, so ``topic`` is the
        topology's parking topic rather than a DLT (``action`` stays ``dlt``).
    :param untrusted_replay: the record carries replay headers that the replay log does not confirm
        (forged, or naming another topology), so they were ignored: it goes to the DLT like any other.
    """

    action: Action
    topic: str | None
    partition: int
    next_attempt: int
    due_ms: int
    delay_ms: int
    reason: Reason
    parked: bool = False
    untrusted_replay: bool = False


class DestinationResolver:
    """
    Resolves failed records of one topology.

    :param topology: the retry path.
    :param clock: returns the current time in epoch milliseconds (injectable for tests).
    :param replay_known: ``replay_known(audit, digest)``: whether the replay log of ``audit.topic``
        recorded that move of the copy whose :func:`~airflow_kafka_retry.policy.headers.replay.copy_digest`
        is ``digest`` (the engine reads the log); without it no replay claim is trusted, so nothing is parked.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        replay_known: Callable[[ReplayAudit, str], bool] | None = None,
    ) -> None:
        self.topology = topology
        self.clock = clock
        self.replay_known = replay_known
        parking = topology.parking_topic
        self._replay_sources = {t.topic for t in topology.dlt_tiers} | ({parking} if parking else set())
        self._classifier = topology.classifier
        self._dlt_classifier = topology.dlt_classifier

    def resolve(
        self,
        *,
        topic: str,
        partition: int,
        attempt: int,
        exception: BaseException,
        original_timestamp_ms: int,
        headers: Iterable[Header] | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
    ) -> Destination:
        """
        Return the destination of a record consumed from ``topic`` that failed on ``attempt``.

        ``headers``, ``key`` and ``value`` are the failed record's: a record replayed from a DLT (its
        audit headers name one of the topology's DLTs or its parking topic, and ``replay_known``
        confirms that move of a copy with this key and value) goes to the parking topic wherever it
        would go to a DLT, so it never loops between a replay and the DLT. Unconfirmed replay headers
        are ignored (``untrusted_replay`` on the destination).
        """
        source = self.topology.tier_for_topic(topic)
        if source.index == 0 and self.topology.on_due == "redeliver":
            # a share group's dead letter of round `attempt`: redelivered from the tier before that round
            source = self.topology.tiers[min(max(attempt, 1) - 1, len(self.topology.tiers) - 1)]
        now = self.clock()
        if source.kind == "dlt":
            destination = self._dlt_failure(source, partition, attempt, exception, now)
        else:
            destination = self._retry_or_dlt(
                source, partition, attempt, exception, original_timestamp_ms, now
            )
        return self._park(destination, headers, key, value)

    def _retry_or_dlt(
        self,
        source: Tier,
        partition: int,
        attempt: int,
        exception: BaseException,
        original_timestamp_ms: int,
        now: int,
    ) -> Destination:
        if isinstance(exception, NotRedeliverableError) or not self._classifier.is_retryable(exception):
            return self._to_dlt(partition, attempt, exception, now, "not_retryable")
        if attempt >= self.topology.attempts:
            return self._to_dlt(partition, attempt, exception, now, "exhausted")
        timeout = self.topology.timeout_ms
        if timeout is not None and now > original_timestamp_ms + timeout:
            return self._to_dlt(partition, attempt, exception, now, "timeout")
        following = self.topology.next_tier(source)
        if following is None:
            return self._to_dlt(partition, attempt, exception, now, "exhausted")
        return Destination(
            "retry",
            following.topic,
            partition,
            attempt + 1,
            now + following.delay_ms,
            following.delay_ms,
            "retryable",
        )

    def _park(
        self,
        destination: Destination,
        headers: Iterable[Header] | None,
        key: bytes | None,
        value: bytes | None,
    ) -> Destination:
        parking = self.topology.parking_topic
        if destination.action != "dlt" or parking is None or not is_replayed(headers):
            return destination
        audit = claimed_replay(headers, self._replay_sources)
        if (
            audit is None
            or self.replay_known is None
            or not self.replay_known(audit, copy_digest(audit.replay_id, key, value))
        ):
            return replace(destination, untrusted_replay=True)
        return Destination(
            "dlt",
            parking,
            destination.partition,
            destination.next_attempt,
            destination.due_ms,
            destination.delay_ms,
            destination.reason,
            parked=True,
        )

    def dlt_topic_for(self, exception: BaseException) -> str | None:
        """The DLT for ``exception``: the first matching exception-specific DLT, else the main one."""
        for topic, classes in self.topology.exception_dlts:
            if self._classifier.first_match(exception, classes, traverse=True):  # Spring: isDirectExcOrCause
                return topic
        return self.topology.dlt_topic

    def _to_dlt(
        self, partition: int, attempt: int, exc: BaseException, now: int, reason: Reason
    ) -> Destination:
        topic = self.dlt_topic_for(exc)
        if topic is None:
            return Destination("drop", None, partition, attempt + 1, now, 0, "no_dlt")
        return Destination("dlt", topic, partition, attempt + 1, now, 0, reason)

    def _dlt_failure(
        self, source: Tier, partition: int, attempt: int, exc: BaseException, now: int
    ) -> Destination:
        # As in Spring: under always_retry_on_error a failure goes back to the same DLT (to the end of
        # it, so a run never meets it again) unless it is one of the default fatal errors; anything
        # else is given up, never looped.
        if self.topology.dlt_strategy == "always_retry_on_error" and not self._dlt_classifier.is_fatal(exc):
            return Destination("dlt", source.topic, partition, attempt + 1, now, 0, "dlt_failure_retried")
        return Destination("drop", None, partition, attempt + 1, now, 0, "dlt_failure_dropped")
