"""
``TierDueTrigger``: wait, in the triggerer, until a retry tier has a due record.

Or until there is nothing to wait for.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_kafka_retry.engine.heads.peek import PeekError, TierPeek, peek_heads
from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.due_check import DueCheck, check_due
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.triggers.broker_calls import CALL_DEADLINE_S, BrokerCalls, CallStuck

#: Never sleep longer than this in one go, so a changed system clock is noticed.
MAX_SLEEP_S = 60.0


def look(
    kafka_config: dict[str, Any],
    topic: str,
    group: str,
    *,
    partitions: Sequence[int] | None,
    window: ReprocessWindow | None,
    deadline_ms: int | None,
    peek_timeout: float,
) -> tuple[DueCheck[int], TierPeek]:
    """Peek at the tier and decide (blocking: Kafka I/O)."""
    peek = peek_heads(kafka_config, topic, group, partitions=partitions, timeout_s=peek_timeout)
    now = wall_clock_ms()
    check = check_due(
        {h.partition: h.due_at(now) for h in peek.heads}, now_ms=now, window=window, deadline_ms=deadline_ms
    )
    return check, peek


def event_payload(check: DueCheck[int], peek: TierPeek) -> dict[str, Any]:
    """What the sensor gets back: the decision and the heads seen (coordinates and due times only)."""
    return {"status": check.action, "check": check.to_dict(), "peek": peek.to_dict()}


class TierDueTrigger(BaseTrigger):
    """
    Waits until a retry tier has a due record, looking again only when something can have changed.

    Each look peeks at the first pending record of every partition from the consumer group's
    committed offset. If a record is due (and the window, if any, is open), or nothing is pending,
    or the next look would be after ``deadline_ms``, it fires one event with ``status`` ``due``,
    ``idle`` or ``skip``; otherwise it sleeps until the earliest due time (or the window's opening)
    and looks again. Kafka calls run in a worker thread: the triggerer's event loop never blocks.
    A broker error fires ``status: error`` with a message naming topic and partition.

    Only the connection id travels in the trigger's arguments, never the Kafka configuration.

    :param topic: the tier's topic.
    :param consumer_group: the group that drains the tier (its committed offsets are the start).
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra).
    :param partitions: only these partitions (default: all).
    :param window: reprocessing window ``HH:MM-HH:MM``; outside it, nothing is due.
    :param timezone: IANA time zone of ``window`` (default UTC).
    :param deadline_ms: epoch ms after which the trigger stops waiting (``skip``); None: no limit.
    :param wake_ms: sleep until this time (epoch ms) before the first look: the earliest due time or
        window opening the deferring sensor saw. None: look at once.
    :param peek_timeout: seconds one peek may take.
    """

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        kafka_conn_id: str = "kafka_default",
        partitions: Sequence[int] | None = None,
        window: str | None = None,
        timezone: str | None = None,
        deadline_ms: int | None = None,
        wake_ms: int | None = None,
        peek_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.consumer_group = consumer_group
        self.kafka_conn_id = kafka_conn_id
        self.partitions = list(partitions) if partitions is not None else None
        self.window = window
        self.timezone = timezone
        self.deadline_ms = deadline_ms
        self.wake_ms = wake_ms
        self.peek_timeout = peek_timeout
        self._window = ReprocessWindow.parse(window, timezone) if window else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "consumer_group": self.consumer_group,
                "kafka_conn_id": self.kafka_conn_id,
                "partitions": self.partitions,
                "window": self.window,
                "timezone": self.timezone,
                "deadline_ms": self.deadline_ms,
                "wake_ms": self.wake_ms,
                "peek_timeout": self.peek_timeout,
            },
        )

    def _kafka_config(self) -> dict[str, Any]:
        return KafkaRetryHook(self.kafka_conn_id).kafka_config()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        where = f"{self.topic} (group {self.consumer_group})"
        calls = BrokerCalls(where)  # a thread of its own, not asyncio's default executor (broker_calls.py)
        try:
            kafka_config = await sync_to_async(self._kafka_config)()
            if self.wake_ms is not None:
                await self._sleep_until(self.wake_ms)
            while True:
                check, peek = await calls.run(
                    "peek at its heads",
                    functools.partial(
                        look,
                        kafka_config,
                        self.topic,
                        self.consumer_group,
                        partitions=self.partitions,
                        window=self._window,
                        deadline_ms=self.deadline_ms,
                        peek_timeout=self.peek_timeout,
                    ),
                    self.peek_timeout + CALL_DEADLINE_S,
                )
                self.log.info("%s: %s", where, check.reason)
                if check.action != "wait":
                    yield TriggerEvent(event_payload(check, peek))
                    return
                await self._sleep_until(check.wake_ms or check.now_ms)
        except (PeekError, CallStuck) as exc:
            yield TriggerEvent({"status": "error", "message": str(exc)})

    @staticmethod
    async def _sleep_until(wake_ms: int) -> None:
        while (remaining := wake_ms - wall_clock_ms()) > 0:  # noqa: ASYNC110 - waits for a time, not a task
            await asyncio.sleep(min(remaining / 1000, MAX_SLEEP_S))
