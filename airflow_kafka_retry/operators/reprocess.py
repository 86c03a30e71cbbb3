"""``ReprocessTierOperator``: reprocess one retry tier with the local engine, inside the Airflow worker."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator

from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID
from airflow_kafka_retry.operators.reprocess_arguments import REPROCESS_TEMPLATE_FIELDS
from airflow_kafka_retry.operators.reprocess_base import ReprocessTierMixin
from airflow_kafka_retry.operators.reprocess_report import stop_message
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.durations import duration_ms

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.notifications.dispatch import Notifier

#: ``RunSummary.stopped`` when ``on_kill`` (Airflow's SIGTERM) stopped the run.
KILLED = "killed"
#: ``RunSummary.stopped`` when the task was interrupted otherwise (e.g. ``execution_timeout``).
INTERRUPTED = "interrupted"
#: ``RunSummary.stopped`` when the task's Airflow supervisor died (see ``supervisor_watch.py``).
SUPERVISOR_GONE = "supervisor_gone"


class ReprocessTierOperator(ReprocessTierMixin, BaseOperator):
    """
    Reprocess the due records of one retry tier (or a DLT) in the worker, with the local engine.

    Each partition's due records go to the handler in batches; failures are routed to the next tier
    or a DLT by the topology's rules, and every chunk of records is committed in one Kafka transaction
    with its routed records (see :mod:`airflow_kafka_retry.engine.drain.partition`).

    The run summary (counts, offsets, dead-letter coordinates; never payloads) is the task's return
    value (XCom). If any partition failed, the task fails with a message naming each failed
    partition and its error; the summary is still pushed to XCom under the key ``summary``.

    Stopping: ``on_kill`` (Airflow's SIGTERM, e.g. when the task is marked failed) stops every
    partition at its next chunk boundary, after committing the chunk it was in, then the task fails
    with the summary under ``summary`` (``stopped: "killed"``). When ``window`` closes or ``max_run``
    has passed, partitions stop the same way and the task succeeds; the summary says
    ``stopped: "window_closed"`` / ``"max_run"`` and what each partition ``left`` for the next run.
    ``execution_timeout`` interrupts the task: partitions stop at their next chunk boundary, then the
    timeout fails the task.

    :param topology: path (or fsspec URL) of the topology YAML, readable by the worker. (templated)
    :param tier: the tier to reprocess: its index (0 = main topic), its topic name, or ``dlt``. (templated)
    :param handler: the handler, ``package.module:function``. (templated)
    :param value_deserializer: ``package.module:function`` decoding record values. (templated)
    :param key_deserializer: ``package.module:function`` decoding record keys. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param options: further :class:`~airflow_kafka_retry.engine.drain.options.DrainOptions` fields
        (``batch_size``, ``chunk_size``, ``max_records``, ``transactional``...). (templated)
    :param cutoff: records due after this stay for a later run: epoch milliseconds, a datetime or an
        ISO-8601 string, or ``"now"`` (when draining starts: a run triggered by a tier's event trigger
        first waits until shortly before the wave it fired for is due, drains from then, and hands no record
        to the handler before its due time); default: the run's data interval end, else its
        logical date, else now. (templated)
    :param partitions: reprocess only these partitions (default: all).
    :param parallelism: partitions processed at once, each with its own Kafka clients (default: the
        local engine's default). Above one, they run in worker processes (one per core at most), which
        import the handler by its path; see docs/handler.md for what it may not rely on there.
    :param in_process: run the partitions in threads of the task's own process instead (the handler then
        shares the task's state; record work uses one core).
    :param on_dlt: notifiers (``BaseNotifier`` instances or callables ``f(context)``) called once, after
        the commit, when the run dead-lettered or dropped a record; ``context["kafka_retry_summary"]``
        is the run summary. A notifier that raises is logged and fails nothing.
    :param window: ``"HH:MM-HH:MM"`` (may cross midnight): when the window closes, partitions stop at
        their next chunk boundary; started outside the window, the run reads nothing. (templated)
    :param timezone: IANA time zone of ``window`` (default UTC). (templated)
    :param max_run: stop partitions at their next chunk boundary this long after the task started:
        ``"2h"``, a timedelta or milliseconds. (templated)
    :param asset_server: the Kafka server (``host:port``) of the asset URIs ``kafka://<server>/<topic>``;
        when given, the next tier and the DLTs are outlets and each event's ``extra`` holds its
        record count. The topology path and tier must not be templated then.
    :param skip_missing_topic: a run that no tier wave started (a sweep, a manual run) is skipped when the
        tier's own topic does not exist yet (the event-mode DAG factory sets it).
    :param follow: when the first record a drain left is due within this long (a timedelta, ``"10s"`` or
        milliseconds), wait for it and drain again in this task (see ``engine/drain/follow.py``), instead of
        leaving it to a new run; None: one drain.
    """

    template_fields: Sequence[str] = REPROCESS_TEMPLATE_FIELDS
    template_fields_renderers = {"options": "json"}
    ui_color = "#e9c46a"

    def __init__(
        self,
        *,
        topology: str,
        tier: int | str,
        handler: str,
        value_deserializer: str | None = None,
        key_deserializer: str | None = None,
        kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
        options: Mapping[str, Any] | None = None,
        cutoff: int | str | datetime | None = None,
        partitions: Sequence[int] | None = None,
        parallelism: int | None = None,
        in_process: bool = False,
        on_dlt: Notifier | Sequence[Notifier] | None = (),
        window: str | None = None,
        timezone: str | None = None,
        max_run: str | int | timedelta | None = None,
        asset_server: str | None = None,
        skip_missing_topic: bool = False,
        follow: timedelta | int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._init_reprocess(
            topology=topology,
            tier=tier,
            handler=handler,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
            kafka_conn_id=kafka_conn_id,
            options=options,
            cutoff=cutoff,
            partitions=partitions,
            on_dlt=on_dlt,
            window=window,
            timezone=timezone,
            max_run=max_run,
            asset_server=asset_server,
            skip_missing_topic=skip_missing_topic,
        )
        if parallelism is not None and (
            isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1
        ):
            raise ValueError(f"parallelism must be an integer >= 1, got {parallelism!r}")
        self.parallelism = parallelism
        self.in_process = in_process
        self.follow_ms = duration_ms(follow) if follow is not None else None
        self._stop_reason: str | None = None

    # ------------------------------------------------------------------ stopping
    def request_stop(self, reason: str) -> None:
        """
        Stop every partition at its next chunk boundary (the first reason asked for is kept).

        An :class:`~airflow_kafka_retry.engine.kafka.deadlines.AbortNow` reason stops them at once, even after
        a plain stop: their chunks in progress are aborted.
        """
        from airflow_kafka_retry.engine.kafka.deadlines import AbortNow  # not when the DAG file is parsed

        upgrade = isinstance(reason, AbortNow) and not isinstance(self._stop_reason, AbortNow)
        if self._stop_reason is None or upgrade:
            self._stop_reason = reason

    def _should_stop(self) -> str | None:
        return self._stop_reason

    def on_kill(self) -> None:
        self.log.warning("kill requested: stopping every partition at its next chunk boundary")
        self.request_stop(KILLED)

    def _supervisor_gone(self, reason: str) -> None:
        # the next try is coming on the same partitions: abort the chunks in progress instead of finishing
        # them beside it (each try would fence the other's transactions until one failed). The stop comes
        # first: the task's log goes through the dead supervisor, and writing to it may fail or block.
        from airflow_kafka_retry.engine.kafka.deadlines import AbortNow

        self.request_stop(AbortNow(SUPERVISOR_GONE))
        with contextlib.suppress(Exception):
            self.log.warning("%s: stopping every partition at once, aborting its chunk in progress", reason)

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        # imported here, not when the DAG file is parsed (the DAG processor needs none of them)
        from airflow_kafka_retry.engine.drain.follow import PASS_LEAD_MS, drain_following
        from airflow_kafka_retry.engine.local.engine import LocalEngine
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
        from airflow_kafka_retry.observability.lineage import lineage_server
        from airflow_kafka_retry.operators.supervisor_watch import stop_when_supervisor_dies
        from airflow_kafka_retry.policy.topology.file import load_topology_from

        # everything a pass needs is made ready first (clients' configuration, partitions, worker processes
        # and their handler import), while a run fired ahead of its wave waits for it to fall due
        started = wall_clock_ms()
        deadline, deadline_reason = self.deadline(started)
        options = self.drain_options(deadline)
        topology = load_topology_from(str(self.topology))
        tier = topology.select(self.tier)
        kafka_config = KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config()
        self._lineage_server = lineage_server(kafka_config)
        self.skip_when_tier_topic_is_missing(context, kafka_config, tier.topic)
        engine = LocalEngine(
            topology,
            tier,
            kafka_config,
            options,
            partitions=self.partitions,
            should_stop=self._should_stop,
            in_process=self.in_process,
            parallelism=self.parallelism,  # None: the engine's
        )
        # the worker processes start up while the run waits for its wave
        with stop_when_supervisor_dies(self._supervisor_gone), engine:
            # the pass starts a lead ahead of the wave; its reader holds each record until it is due (an
            # explicit cutoff is the run's own: no lead then, the run drains after the wave is due as before)
            lead = PASS_LEAD_MS if self.cutoff_is_now(context) else 0
            wave_cutoff = self.wait_for_wave(context, self._should_stop, lead_ms=lead)
            cutoff = self.cutoff_ms(context, wave_cutoff)
            self.log.info(
                "reprocessing %s (tier %s) of %s with handler %s, cutoff %s%s",
                tier.topic,
                tier.index,
                self.topology,
                options.handler,
                cutoff,
                f", stopping at {deadline} ({deadline_reason})" if deadline is not None else "",
            )
            summary = self._run(
                lambda: drain_following(
                    engine.drain,
                    cutoff_ms=cutoff,
                    follow_ms=self.follow_ms,
                    should_stop=self._should_stop,
                    deadline_ms=deadline,
                )
            )
        if summary.stopped == SUPERVISOR_GONE:  # nobody to report to: Airflow runs the task again
            raise AirflowException(f"the task's supervisor is gone: {stop_message(summary)}")
        killed = summary.stopped == KILLED
        document = self.report(
            context, summary, engine="Local", deadline_reason=deadline_reason, topology=topology
        )
        if killed:
            context["ti"].xcom_push(key="summary", value=document)
            raise AirflowException(f"killed: {stop_message(summary)}")
        return document

    def _run(self, drain: Any) -> RunSummary:
        """
        Run ``drain`` in a helper thread.

        An exception raised in this thread by a signal handler (``execution_timeout``) then stops the
        partitions at a chunk boundary instead of leaving them running.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-retry-drain") as pool:
            future = pool.submit(drain)
            try:
                return future.result()
            except BaseException:
                if not future.done():
                    self.request_stop(INTERRUPTED)
                    self.log.warning("interrupted: stopping every partition at its next chunk boundary")
                    future.exception()  # wait for the boundary; the interruption is what is raised
                raise
