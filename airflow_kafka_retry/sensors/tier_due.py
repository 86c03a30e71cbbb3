"""``RetryTierDueSensor``: wait until a retry tier has a due record; skip an idle tier at once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException
from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.durations import parse_duration_ms
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Tier, Topology

if TYPE_CHECKING:
    from airflow.sdk import Context


def wait_limit(value: timedelta | float | str | None) -> timedelta | None:
    """``max_wait`` as a timedelta: a timedelta, seconds, or a duration string (``90s``, ``5m``, ``2h``)."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"max_wait must be a timedelta, seconds or a duration like '5m', got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"max_wait cannot be negative, got {value!r}")
        return timedelta(seconds=value)
    try:
        return timedelta(milliseconds=parse_duration_ms(value))
    except ValueError as exc:
        raise ValueError(f"max_wait: {exc}") from None


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class RetryTierDueSensor(BaseSensorOperator):
    """
    Wait until a retry tier has a record that is due, so a drain started next has work to do.

    It peeks at the first pending record of each partition, from the tier group's committed offset
    (nothing is read further and nothing is committed). Then:

    * a record is due: the task succeeds and returns (XCom) ``{"topic", "group", "tier",
      "due_partitions", "earliest_due_ms", "pending_partitions", "checked_at_ms", "heads"}``;
    * nothing is pending: the task is skipped (an idle tier costs one cheap look);
    * records are pending but not due yet: it waits until the earliest due time it saw, then looks
      again (deferred to the triggerer by default; not a fixed poke loop);
    * outside the reprocessing ``window``, nothing is due: it waits for the window's opening.

    Each look it makes itself (not the trigger's) also sends the tier's backlog gauges through
    Airflow's metrics (``kafka_retry.tier.backlog`` and ``kafka_retry.tier.oldest_due_age_ms``, see
    :func:`~airflow_kafka_retry.observability.metrics.emit_tier_backlog`) when it looks at every
    partition; on the main topic of an ``ordering: key`` topology also its key-order gauges
    (``kafka_retry.ordering.*``, read from ``<topic>-order-state``).

    With ``max_wait``, a wait that would end later than ``max_wait`` after the sensor started skips
    the task instead: the next scheduled run will find the records. The DAG factory sets it to the
    tier's schedule interval. This also keeps ``airflow dags test`` (which runs triggers inline
    with no deferral timeout) from waiting long on a not-yet-due tier.

    A record without a due header (main topic, DLT, Spring records without back-off header) is due
    at once.

    :param topology: a :class:`~airflow_kafka_retry.policy.topology.model.Topology` or the path of its
        YAML file. (templated)
    :param tier: the tier: its index (0 = main topic), its topic name, or ``dlt``. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param consumer_group: the group whose committed offsets are the start; default: the tier's group
        from the topology. (templated)
    :param window: reprocessing window ``"HH:MM-HH:MM"`` (may cross midnight). (templated)
    :param timezone: IANA time zone of ``window``, default UTC. (templated)
    :param max_wait: how long the sensor may wait: a timedelta, seconds, or a duration string
        (``"5m"``); None waits as long as needed (replaces ``BaseSensorOperator``'s ``max_wait``,
        which caps the interval between pokes; in poke mode it still does).
    :param partitions: only these partitions (default: all).
    :param peek_timeout: seconds one peek may take before the task fails, naming the partitions.
    :param deferrable: wait in the triggerer (default) rather than in a worker slot.
    """

    template_fields: Sequence[str] = (
        "topology",
        "tier",
        "kafka_conn_id",
        "consumer_group",
        "window",
        "timezone",
    )
    ui_color = "#cfe8d5"

    def __init__(
        self,
        *,
        topology: Topology | str | Path,
        tier: int | str,
        kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
        consumer_group: str | None = None,
        window: str | None = None,
        timezone: str | None = None,
        max_wait: timedelta | float | str | None = None,
        partitions: Sequence[int] | None = None,
        peek_timeout: float = 30.0,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = str(topology) if isinstance(topology, Path) else topology
        self.tier = tier
        self.kafka_conn_id = kafka_conn_id
        self.consumer_group = consumer_group
        self.window = window
        self.timezone = timezone
        self.max_wait = wait_limit(max_wait)
        self.partitions = list(partitions) if partitions is not None else None
        self.peek_timeout = peek_timeout
        self.deferrable = deferrable
        self._deadline_ms: int | None = None
        if window and not _templated(window) and not _templated(timezone):
            ReprocessWindow.parse(window, timezone)  # a bad window fails the DAG file, not the run

    # ------------------------------------------------------------------ what to look at
    def _topology(self) -> Topology:
        return self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)

    def _tier(self, topology: Topology | None = None) -> tuple[Tier, str]:
        topology = topology or self._topology()
        tier = topology.select(self.tier)
        return tier, self.consumer_group or topology.consumer_group(tier)

    def _window(self) -> ReprocessWindow | None:
        return ReprocessWindow.parse(self.window, self.timezone or None) if self.window else None

    def _start_clock(self, context: Context) -> int | None:
        """
        The deadline of this sensor's waiting (epoch ms), fixed at its first look.

        In reschedule mode, the first look of the first try's reschedules.
        """
        if self._deadline_ms is None and self.max_wait is not None:
            started = wall_clock_ms()
            if self.reschedule and context.get("ti") is not None:
                first = context["ti"].get_first_reschedule_date(context)
                if first is not None:
                    started = int(first.timestamp() * 1000)
            self._deadline_ms = started + int(self.max_wait.total_seconds() * 1000)
        return self._deadline_ms

    def _look(self, context: Context) -> tuple[Tier, str, dict[str, Any]]:
        # imported here, not when the DAG file is parsed (the Kafka client, the engine, the metrics)
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
        from airflow_kafka_retry.observability.metrics import emit_tier_backlog
        from airflow_kafka_retry.triggers.tier_due import event_payload, look

        topology = self._topology()
        tier, group = self._tier(topology)
        kafka_config = KafkaRetryHook(self.kafka_conn_id).kafka_config()
        check, peek = look(
            kafka_config,
            tier.topic,
            group,
            partitions=self.partitions,
            window=self._window(),
            deadline_ms=self._start_clock(context),
            peek_timeout=self.peek_timeout,
        )
        self.log.info("%s (group %s): %s; backlog %s", tier.topic, group, check.reason, peek.backlog)
        if self.partitions is None:  # the gauge is the whole tier's: a look at some partitions is not
            emit_tier_backlog(peek, topology, tier, now_ms=check.now_ms)
        return tier, group, event_payload(check, peek)

    # ------------------------------------------------------------------ outcomes
    def _outcome(self, event: dict[str, Any], tier_index: int | None = None) -> dict[str, Any] | None:
        """The XCom value of a ``due`` event; raises to skip or fail on the others; None: keep waiting."""
        status = event.get("status")
        if status == "error":
            raise AirflowException(f"tier due check failed: {event.get('message')}")
        check, peek = event["check"], event["peek"]
        where = f"{peek['topic']} (group {peek['group']})"
        if status in ("idle", "skip"):
            raise AirflowSkipException(f"{where}: {check['reason']}")
        if status == "wait":
            return None
        if status != "due":
            raise AirflowException(f"tier due check of {where}: unexpected event status {status!r}")
        return {
            "topic": peek["topic"],
            "group": peek["group"],
            "tier": tier_index,
            "due_partitions": check["due_partitions"],
            "earliest_due_ms": check["earliest_due_ms"],
            "pending_partitions": check["pending_partitions"],
            "checked_at_ms": check["now_ms"],
            "heads": peek["heads"],
        }

    def execute(self, context: Context) -> Any:
        from airflow_kafka_retry.triggers.tier_due import TierDueTrigger

        if not self.deferrable:
            return super().execute(context)
        tier, group, event = self._look(context)
        if event["status"] == "wait":
            self.defer(
                trigger=TierDueTrigger(
                    topic=tier.topic,
                    consumer_group=group,
                    kafka_conn_id=self.kafka_conn_id,
                    partitions=self.partitions,
                    window=self.window,
                    timezone=self.timezone,
                    deadline_ms=self._deadline_ms,
                    wake_ms=event["check"]["wake_ms"],
                    peek_timeout=self.peek_timeout,
                ),
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout),
            )
        return self._outcome(event, tier.index)

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Resumed from :class:`TierDueTrigger`: succeed with the due partitions, or skip, or fail."""
        if not event:
            raise AirflowException("the tier due trigger fired without an event")
        tier_index = self._tier()[0].index if event.get("status") == "due" else None
        return self._outcome(event, tier_index)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Non-deferrable mode: one look; False while records are pending but not due."""
        tier, _, event = self._look(context)
        value = self._outcome(event, tier.index)
        return False if value is None else PokeReturnValue(is_done=True, xcom_value=value)
