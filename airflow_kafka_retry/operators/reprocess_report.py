"""
How the local and the Spark reprocess operators report a finished run.

The summary as XCom, metrics, DLT notifiers (after the engine committed), asset events with record
counts, OpenLineage facets, and the messages naming each failed or stopped partition. The engines
decide and commit; this only reports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.common.compat.sdk import AirflowException

from airflow_kafka_retry.notifications.dispatch import Notifier, notify_dlt

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset

    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Topology

#: How many dead-letter coordinates, over all partitions, a notifier gets.
NOTIFY_COORDINATE_CAP = 100


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


class ReprocessReportMixin:
    """
    The reporting of both reprocess operators (through ``ReprocessTierMixin``, mixed into a ``BaseOperator``).

    ``ReprocessTierMixin._init_reprocess`` sets the attributes below; the operators call :meth:`report`
    with the run summary once the engine has committed.
    """

    topology: str
    tier: int | str
    kafka_conn_id: str
    asset_server: str | None
    on_dlt: tuple[Notifier, ...]
    outlets: list[Any]
    log: Any
    #: The outlet asset of each topic the tier routes to (``asset_server`` set), else empty.
    _tier_assets: dict[str, Asset]
    #: The last run's summary document, for OpenLineage.
    _run_document: dict[str, Any] | None
    #: host:port of the run's Kafka connection.
    _lineage_server: str | None

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
                from airflow_kafka_retry.policy.topology.file import load_topology_from

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
        from airflow_kafka_retry.policy.topology.file import load_topology_from

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
