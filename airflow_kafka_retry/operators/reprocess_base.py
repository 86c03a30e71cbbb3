"""
What the local and the Spark reprocess operators share.

Their parameters and templated fields, the checks of ``options``, the due-time cutoff, the deadline
from a reprocessing window and ``max_run``, and the reporting of a finished run: the summary as
XCom, DLT notifiers (after the engine committed), asset events with record counts, and the failure
message naming each failed partition. The engines decide and commit; this only assembles and reports.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException

from airflow_kafka_retry.engine.options import DrainOptions
from airflow_kafka_retry.notifications.dispatch import Notifier, normalize_notifiers, notify_dlt
from airflow_kafka_retry.policy.durations import duration_ms
from airflow_kafka_retry.policy.resolver import wall_clock_ms
from airflow_kafka_retry.policy.windows import ReprocessWindow
from airflow_kafka_retry.triggers.tier_events import TIER_DUE

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset

    from airflow_kafka_retry.engine.summary import RunSummary
    from airflow_kafka_retry.policy.topology import Topology

#: Options named by their own operator parameters, not through ``options``.
OWN_PARAMETERS = ("handler", "value_deserializer", "key_deserializer")
#: Options the operator sets itself, from ``window`` and ``max_run``.
DERIVED_OPTIONS = {"deadline_ms": "window/max_run"}
#: Templated fields of both operators (each adds its own).
REPROCESS_TEMPLATE_FIELDS = (
    "topology",
    "tier",
    "handler",
    "value_deserializer",
    "key_deserializer",
    "kafka_conn_id",
    "options",
    "cutoff",
    "window",
    "timezone",
    "max_run",
)
#: How many dead-letter coordinates, over all partitions, a notifier gets.
NOTIFY_COORDINATE_CAP = 100
#: ``cutoff="now"``: records due when the run starts draining (after waiting for its wave).
CUTOFF_NOW = "now"
#: A run never waits longer than this for the wave that triggered it (a trigger fires seconds ahead).
MAX_WAVE_WAIT_MS = 60_000


def to_epoch_ms(value: Any) -> int:
    """Epoch milliseconds from an int/float (ms), a datetime (naive = UTC) or an ISO-8601/digit string."""
    if isinstance(value, bool):
        raise ValueError(
            f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}"
        )
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"cutoff {value!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    raise ValueError(f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}")


def wave_not_before_ms(context: Mapping[str, Any]) -> int | None:
    """
    When the last tier-due wave that triggered this run is due (epoch ms); None: no such event.

    Events come from :class:`~airflow_kafka_retry.triggers.tier_events.TierDueEventTrigger` through the
    run's ``triggering_asset_events`` (``extra["payload"]``). With several queued waves the latest counts,
    so every wave's records are due when the run drains.
    """
    times = []
    for events in (context.get("triggering_asset_events") or {}).values():
        for event in events:
            extra = getattr(event, "extra", None)
            payload = extra.get("payload") if isinstance(extra, Mapping) else None
            if isinstance(payload, Mapping) and payload.get("kind") == TIER_DUE:
                value = payload.get("not_before_ms")
                if isinstance(value, int) and not isinstance(value, bool):
                    times.append(value)
    return max(times) if times else None


def check_option_names(options: Mapping[str, Any]) -> None:
    """Refuse options that have their own parameter, that the operator derives, or that do not exist."""
    known = {f.name for f in dataclasses.fields(DrainOptions)} - set(OWN_PARAMETERS) - set(DERIVED_OPTIONS)
    own = sorted(set(options) & set(OWN_PARAMETERS))
    if own:
        raise ValueError(f"pass {', '.join(own)} as operator argument(s), not in options")
    derived = sorted(set(options) & set(DERIVED_OPTIONS))
    if derived:
        raise ValueError(
            f"option(s) {', '.join(derived)} are set by the operator: use "
            f"{', '.join(DERIVED_OPTIONS[d] for d in derived)} instead"
        )
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(known))}")


def max_run_ms(value: Any) -> int | None:
    """``max_run`` as milliseconds: a timedelta, a duration string (``"2h"``, ``"90m"``) or milliseconds."""
    if value is None or value == "":
        return None
    try:
        ms = duration_ms(value)
    except ValueError as exc:
        raise ValueError(f"max_run: {exc}") from None
    if ms <= 0:
        raise ValueError(f"max_run must be longer than 0, got {value!r}")
    return ms


def failure_message(summary: RunSummary, engine: str = "Spark") -> str:
    """Which partitions failed and why, for the task's exception."""
    failed = sorted(summary.failed_partitions, key=lambda p: p.partition)
    lines = [
        (
            f"{engine} reprocessing of {summary.topic} (tier {summary.tier}, group {summary.group}) "
            f"failed on {len(failed)} of {len(summary.partitions)} partition(s); other partitions committed "
            "their progress and a rerun resumes each failed one from its committed offset:"
        )
    ]
    lines += [
        f"  partition {p.partition}: {p.error or 'failed'} (committed up to {p.committed_offset})"
        for p in failed
    ]
    return "\n".join(lines)


def stop_message(summary: RunSummary) -> str:
    """Where each stopped partition stopped and what it left for the next run."""
    stopped = sorted((p for p in summary.partitions if p.stop_reason == "stopped"), key=lambda p: p.partition)
    parts = [
        f"{p.partition} at offset {p.committed_offset if p.committed_offset is not None else p.start_offset}"
        f" ({'unknown' if p.left is None else p.left} left)"
        for p in stopped
    ]
    return (
        f"{summary.topic}: stopped ({summary.stopped}) at a chunk boundary; everything before it is "
        "committed "
        f"and the rest stays for the next run: partition(s) {', '.join(parts)}"
    )


def notifier_summary(document: Mapping[str, Any], cap: int = NOTIFY_COORDINATE_CAP) -> dict[str, Any]:
    """The run summary for notifiers: the run's document plus its dead letters over all partitions, capped."""
    letters = [dict(d) for p in document["partitions"] for d in p["dead_letters"]]
    truncated = sum(p["dead_letters_truncated"] for p in document["partitions"]) + max(0, len(letters) - cap)
    return {**document, "dead_letters": letters[:cap], "dead_letters_truncated": truncated}


def has_dead_letters(summary: RunSummary) -> bool:
    """True when the run sent at least one record to a DLT or dropped one."""
    return any(p.dead_lettered or p.dropped for p in summary.partitions)


class ReprocessTierMixin:
    """
    The parameters and the reporting both reprocess operators share (mixed into a ``BaseOperator``).

    Subclasses call :meth:`_init_reprocess` from their constructor and :meth:`report` with the run
    summary once the engine has committed.
    """

    topology: str
    tier: int | str
    kafka_conn_id: str
    options: dict[str, Any]
    window: str | None
    timezone: str | None
    max_run: str | int | timedelta | None
    asset_server: str | None
    on_dlt: tuple[Notifier, ...]
    outlets: list[Any]
    log: Any

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
        if not _templated(window, timezone):
            self.reprocess_window()  # a bad window fails when the DAG is parsed
        if not _templated(max_run):
            max_run_ms(max_run)
        self._tier_assets: dict[str, Asset] = {}
        self._run_document: dict[str, Any] | None = None  # the last run's summary, for OpenLineage
        self._lineage_server: str | None = None  # host:port of the run's Kafka connection
        if asset_server:
            if _templated(topology, tier):
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

    def cutoff_ms(self, context: Context) -> int:
        """
        The due-time cutoff of this run (see the ``cutoff`` parameter).

        ``"now"``: when the run starts draining.
        """
        value = self.cutoff
        if value is None or value == "":
            value = context.get("data_interval_end") or context.get("logical_date")
        return wall_clock_ms() if value is None or value == CUTOFF_NOW else to_epoch_ms(value)

    def skip_when_tier_topic_is_missing(
        self, context: Context, kafka_config: Mapping[str, Any], topic: str
    ) -> None:
        """
        Event mode (``skip_missing_topic``): skip a run that no wave started when its topic is missing.

        A run that no wave started (a sweep, a manual run) skips when the tier's own topic does not exist yet
        -- nothing can be due there. A missing destination still fails the run, naming it.
        """
        if not self.skip_missing_topic or wave_not_before_ms(context) is not None:
            return
        from airflow_kafka_retry.engine.topics import missing_topics

        if missing_topics(kafka_config, [topic]):
            raise AirflowSkipException(
                f"{topic} does not exist yet, so nothing is due there; the topology's "
                "setup DAG (or airflow-kafka-retry topology create-topics) creates it"
            )

    def wait_for_wave(self, context: Context, should_stop: Callable[[], str | None] = lambda: None) -> None:
        """
        In a run started by a tier's event trigger, wait until the wave it fired for is due.

        The trigger fires a little ahead of the due time, so the time Airflow takes to start this
        task is not added to the records' lateness; the cutoff (``"now"``) is taken after this wait.
        """
        wake = wave_not_before_ms(context)
        if wake is None:
            return
        if wake - wall_clock_ms() > MAX_WAVE_WAIT_MS:
            self.log.warning(
                "the triggering wave is due at %s, more than %ss ahead: not waiting for it",
                wake,
                MAX_WAVE_WAIT_MS // 1000,
            )
            return
        if wake > wall_clock_ms():
            self.log.info(
                "waiting %.1fs until the wave that triggered this run is due", (wake - wall_clock_ms()) / 1000
            )
        while (remaining := wake - wall_clock_ms()) > 0 and should_stop() is None:
            time.sleep(min(remaining / 1000, 0.2))

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

    # ------------------------------------------------------------------ reporting
    def report(
        self,
        context: Context,
        summary: RunSummary,
        *,
        engine: str,
        deadline_reason: str | None = None,
        cause: BaseException | None = None,
        topology: Topology | None = None,
    ) -> dict[str, Any]:
        """
        Log, send metrics, notify, set asset events; return the summary document.

        When a partition failed, push the document and raise instead.

        The engine has committed every finished chunk by now, so notifiers run after the commit.
        """
        if deadline_reason and summary.stopped == "deadline":
            summary.stopped = deadline_reason
            for p in summary.partitions:
                if p.stopped_by == "deadline":
                    p.stopped_by = deadline_reason
        document = summary.to_dict()
        self._run_document = document
        self.log.info("%s: %s", summary.topic, json.dumps(document["totals"]))
        self._send_metrics(summary, topology)
        if summary.stopped:
            self.log.warning("%s", stop_message(summary))
        if self.on_dlt and has_dead_letters(summary):
            # Airflow's Context is a TypedDict over a plain dict: notify_dlt adds the summary to it
            called = notify_dlt(
                self.on_dlt, cast("MutableMapping[str, Any]", context), notifier_summary(document)
            )
            self.log.info(
                "%s: %s of %s DLT notifier(s) called without error", summary.topic, called, len(self.on_dlt)
            )
        if not summary.ok:
            context["ti"].xcom_push(key="summary", value=document)
            raise AirflowException(failure_message(summary, engine)) from cause
        self._set_asset_events(context, summary, document)
        return document

    def _send_metrics(self, summary: RunSummary, topology: Topology | None) -> None:
        from airflow_kafka_retry.observability.metrics import emit, run_metrics

        try:
            if topology is None:
                from airflow_kafka_retry.policy.topology_file import load_topology_from

                topology = load_topology_from(str(self.topology))
            metrics = run_metrics(summary, topology)
        except Exception as exc:  # observability never fails a run that did its work
            self.log.warning("%s: no metrics for this run: %s: %s", summary.topic, type(exc).__name__, exc)
            return
        emit(metrics)

    # ------------------------------------------------------------------ OpenLineage
    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The tier topic in; the next tier, the DLTs and the parking topic out (no counts yet)."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """As on start, with record counts and the ``kafkaRetry`` run facet (the summary's totals)."""
        return self._lineage(self._run_document)

    def _lineage(self, document: dict[str, Any] | None) -> OperatorLineage:
        from airflow_kafka_retry.observability.lineage import connection_server, tier_run_lineage
        from airflow_kafka_retry.policy.topology_file import load_topology_from

        topology = load_topology_from(str(self.topology))
        server = self.asset_server or self._lineage_server or connection_server(self.kafka_conn_id)
        return tier_run_lineage(topology, topology.select(self.tier), server, document)

    def _set_asset_events(self, context: Context, summary: RunSummary, document: Mapping[str, Any]) -> None:
        """
        Each outlet topic that received records gets an event whose ``extra`` holds the counts.

        Outlet topics that received nothing are taken off this run's outlets, so a DAG scheduled on
        ``orders-dlt`` runs when records reached that DLT, not after every tier run.
        """
        if not self._tier_assets:
            return
        routed = document["totals"]["routed"]
        idle = []
        for topic, asset in self._tier_assets.items():
            records = routed.get(topic, 0)
            if not records:
                idle.append(asset)
                continue
            context["outlet_events"][asset].extra = {
                "records": records,
                "source_topic": summary.topic,
                "source_tier": summary.tier,
                "group": summary.group,
            }
        self.outlets = [o for o in self.outlets if not any(o is a for a in idle)]


def _templated(*values: Any) -> bool:
    return any(isinstance(v, str) and ("{{" in v or "{%" in v) for v in values)
