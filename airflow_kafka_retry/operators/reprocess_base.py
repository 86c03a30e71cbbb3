"""
The parameters of the local and the Spark reprocess operators, and how a run is built from them.

``ReprocessTierMixin`` takes the shared parameters (checked in ``reprocess_arguments.py``) and gives
each run its options, its due-time cutoff, its wait for the wave that triggered it and its deadline
from a reprocessing window and ``max_run``; it reports the finished run through
``reprocess_report.py``. The engines decide and commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSkipException

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.notifications.dispatch import Notifier, normalize_notifiers
from airflow_kafka_retry.operators.reprocess_arguments import (
    CUTOFF_NOW,
    check_option_names,
    max_run_ms,
    templated,
    to_epoch_ms,
)
from airflow_kafka_retry.operators.reprocess_report import ReprocessReportMixin
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.triggers.tier_events import TIER_DUE
from airflow_kafka_retry.triggers.topology_lanes import TOPOLOGY_DUE, event_payloads

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: A run never waits longer than this for the wave that triggered it (a trigger fires seconds ahead).
MAX_WAVE_WAIT_MS = 60_000


def wave_not_before_ms(context: Mapping[str, Any]) -> int | None:
    """
    When the last wave that triggered this task is due (epoch ms); None: no such event.

    Events come through the run's ``triggering_asset_events`` (``extra["payload"]``): a tier DAG's from its
    :class:`~airflow_kafka_retry.triggers.tier_events.TierDueEventTrigger`, a topology DAG's from its
    :class:`~airflow_kafka_retry.triggers.topology_events.TopologyDueEventTrigger` (the lane named by this
    task's id). With several queued waves the latest counts, so every wave's records are due when the
    run drains.
    """
    events = context.get("triggering_asset_events")
    times = [payload.get("not_before_ms") for payload in event_payloads(events, TIER_DUE)]
    task_id = getattr(context.get("ti"), "task_id", None)
    for payload in event_payloads(events, TOPOLOGY_DUE):
        lane = (payload.get("lanes") or {}).get(task_id)
        if isinstance(lane, Mapping):
            times.append(lane.get("not_before_ms"))
    valid = [t for t in times if isinstance(t, int) and not isinstance(t, bool)]
    return max(valid) if valid else None


class ReprocessTierMixin(ReprocessReportMixin):
    """
    The parameters and the reporting both reprocess operators share (mixed into a ``BaseOperator``).

    Subclasses call :meth:`_init_reprocess` from their constructor and :meth:`report` (from
    :class:`~airflow_kafka_retry.operators.reprocess_report.ReprocessReportMixin`) with the run
    summary once the engine has committed.
    """

    options: dict[str, Any]
    window: str | None
    timezone: str | None
    max_run: str | int | timedelta | None

    def _init_reprocess(
        self,
        *,
        topology: str,
        tier: int | str,
        handler: str,
        value_deserializer: str | None,
        key_deserializer: str | None,
        kafka_conn_id: str,
        options: Mapping[str, Any] | None,
        cutoff: int | str | datetime | None,
        partitions: Sequence[int] | None,
        on_dlt: Notifier | Sequence[Notifier] | None,
        window: str | None,
        timezone: str | None,
        max_run: str | int | timedelta | None,
        asset_server: str | None,
        skip_missing_topic: bool = False,
    ) -> None:
        self.topology = topology
        self.tier = tier
        self.handler = handler
        self.value_deserializer = value_deserializer
        self.key_deserializer = key_deserializer
        self.kafka_conn_id = kafka_conn_id
        self.options = dict(options or {})
        self.cutoff = cutoff
        self.partitions = list(partitions) if partitions is not None else None
        self.on_dlt = normalize_notifiers(on_dlt)
        self.window = window
        self.timezone = timezone
        self.max_run = max_run
        self.asset_server = asset_server
        self.skip_missing_topic = skip_missing_topic
        check_option_names(self.options)
        if not templated(window, timezone):
            self.reprocess_window()  # a bad window fails when the DAG is parsed
        if not templated(max_run):
            max_run_ms(max_run)
        self._tier_assets = {}
        self._run_document = None  # the last run's summary, for OpenLineage
        self._lineage_server = None  # host:port of the run's Kafka connection
        if asset_server:
            if templated(topology, tier):
                raise ValueError(
                    "asset_server needs the topology path and the tier as plain values (not templated): "
                    "the outlets are declared when the DAG is parsed"
                )
            from airflow_kafka_retry.assets import reprocess_outlets

            self._tier_assets = reprocess_outlets(topology, tier, asset_server)
            self.outlets = [*self.outlets, *self._tier_assets.values()]

    # ------------------------------------------------------------------ building the run
    def drain_options(self, deadline_ms: int | None = None) -> DrainOptions:
        """The run options from ``handler``, the deserializers and ``options`` (after templating)."""
        check_option_names(self.options)
        return DrainOptions(
            handler=self.handler,
            value_deserializer=self.value_deserializer or None,
            key_deserializer=self.key_deserializer or None,
            deadline_ms=deadline_ms,
            **self.options,
        )

    def cutoff_ms(self, context: Context, wave_cutoff_ms: int | None = None) -> int:
        """
        The due-time cutoff of this run (see the ``cutoff`` parameter).

        ``"now"``: when the run starts draining; in a run that waited for its wave, the cutoff
        :meth:`wait_for_wave` returned (``wave_cutoff_ms``), if later.
        """
        value = self._cutoff_value(context)
        if value is None or value == CUTOFF_NOW:
            now = wall_clock_ms()
            return now if wave_cutoff_ms is None else max(now, wave_cutoff_ms)
        return to_epoch_ms(value)

    def cutoff_is_now(self, context: Context) -> bool:
        """Whether the cutoff is when the run drains (``"now"``, or no date to take it from)."""
        value = self._cutoff_value(context)
        return value is None or value == CUTOFF_NOW

    def _cutoff_value(self, context: Context) -> Any:
        value = self.cutoff
        if value is None or value == "":
            value = context.get("data_interval_end") or context.get("logical_date")
        return value

    def skip_when_tier_topic_is_missing(
        self, context: Context, kafka_config: Mapping[str, Any], topic: str
    ) -> None:
        """
        Event mode (``skip_missing_topic``): skip a run that no wave started when its topic is missing.

        A run that no wave started (a sweep, a manual run) skips when the tier's own topic does not exist yet
        -- nothing can be due there. A missing destination still fails the run, naming it; so does a topic
        the principal may not describe (``NotAuthorized``), which is never taken for a missing one.
        """
        if not self.skip_missing_topic or wave_not_before_ms(context) is not None:
            return
        from airflow_kafka_retry.engine.kafka.topic_admin import missing_topics

        if missing_topics(kafka_config, [topic]):
            raise AirflowSkipException(
                f"{topic} does not exist yet, so nothing is due there; the topology's "
                "setup DAG (or airflow-kafka-retry topology create-topics) creates it"
            )

    def wait_for_wave(
        self, context: Context, should_stop: Callable[[], str | None] = lambda: None, lead_ms: int = 0
    ) -> int | None:
        """
        In a run started by a tier's event trigger, wait until ``lead_ms`` before its wave is due.

        The trigger fires a little ahead of the due time, so the time Airflow takes to start this
        task is not added to the records' lateness. Returns the cutoff of the pass that starts then (the
        wave's due time plus ``lead_ms``, or now if later: ``engine/drain/follow.py``), or None when the run
        did not wait (no wave, or one too far ahead). With a lead, the engine's reader holds each record
        until it is due. The Spark operator waits with no lead: its cutoff is taken after the wait.
        """
        from airflow_kafka_retry.engine.drain.follow import wait_for_pass

        wake = wave_not_before_ms(context)
        if wake is None:
            return None
        if wake - wall_clock_ms() > MAX_WAVE_WAIT_MS:
            self.log.warning(
                "the triggering wave is due at %s, more than %ss ahead: not waiting for it",
                wake,
                MAX_WAVE_WAIT_MS // 1000,
            )
            return None
        if wake - lead_ms > wall_clock_ms():
            self.log.info(
                "waiting %.1fs until the wave that triggered this run is due%s",
                (wake - wall_clock_ms()) / 1000,
                f" (less a lead of {lead_ms} ms)" if lead_ms else "",
            )
        return wait_for_pass(wake, should_stop=should_stop, lead_ms=lead_ms)

    def reprocess_window(self) -> ReprocessWindow | None:
        if not self.window:
            if self.timezone:
                raise ValueError("timezone is only used with a window; pass window='HH:MM-HH:MM' too")
            return None
        return ReprocessWindow.parse(self.window, self.timezone or None)

    def deadline(self, now_ms: int) -> tuple[int | None, str | None]:
        """
        When this run must stop (epoch ms) and why: the window's closing or ``max_run``, whichever is first.

        Outside the window the deadline is ``now_ms``: the run stops before reading anything.
        """
        candidates: list[tuple[int, str]] = []
        window = self.reprocess_window()
        if window is not None:
            closes = window.closes_at_ms(now_ms)
            candidates.append((now_ms if closes is None else closes, "window_closed"))
        limit = max_run_ms(self.max_run)
        if limit is not None:
            candidates.append((now_ms + limit, "max_run"))
        if not candidates:
            return None, None
        return min(candidates)
