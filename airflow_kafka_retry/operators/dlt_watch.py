"""``DltWatchOperator``: notice new records in a topology's dead-letter topics and call the DLT notifiers."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.common.compat.sdk import AirflowSkipException
from airflow.sdk import BaseOperator

from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID
from airflow_kafka_retry.notifications.dispatch import Notifier, normalize_notifiers, notify_dlt
from airflow_kafka_retry.policy.client_names import WATCH_GROUP_TEMPLATE
from airflow_kafka_retry.policy.headers.bounds import bound_counts, bound_metadata_tags, bound_strings
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

    from airflow_kafka_retry.engine.scans.dlt_scan import DltWatchSummary
    from airflow_kafka_retry.policy.topology.acl import AclBinding

#: Seconds the check of the watch's ACLs before a scan may take (``engine/kafka/authorization.py``).
PRECHECK_TIMEOUT_S = 10.0


def watched_topics(topology: Topology) -> tuple[list[str], list[str]]:
    """
    What the DLT watch of ``topology`` reads: every topic, and those of them watched once they exist.

    Its DLTs, then its parking topic and the other frameworks' queues it names (``dead_letter_queues``):
    the setup task creates the parking topic, and a queue is created by the framework that writes it (a
    Connect worker, the broker for a share group), at any time. The topology watcher's ``watch_dlt`` lane
    and the DLT-watch DAG's event trigger take both lists as they are.
    """
    parking = [topology.parking_topic] if topology.parking_topic else []
    optional = parking + list(topology.dead_letter_queue_topics)
    return [t.topic for t in topology.dlt_tiers] + optional, optional


class DltWatchOperator(BaseOperator):
    """
    Report records that arrived in any dead-letter topic of a topology since the last run.

    It reads every DLT of the topology (the main DLT and exception-specific ones), its parking topic
    (replayed records that failed again) and the other frameworks' dead-letter queues the topology names
    (``dead_letter_queues``; these two once they exist) from its own consumer group's
    committed offset to the end, and summarises what it found: counts per exception class and per cause
    class, per dead-letter family and per DLT topic (``totals.dlt_topic_families``: per topic and family),
    the records lacking each field (``totals.missing``), and the coordinates of up to ``coordinate_cap``
    records (where each failed, where it sits now, its family; None where it does not say). A queue's
    ``family`` names what its records without any family's headers are (a Connect DLQ without context
    headers, Airflow's provider's). Records of every family are
    read (:mod:`~airflow_kafka_retry.policy.dead_letters.families`: Spring's two header spellings, so records
    a Spring service dead-lettered count too, Kafka Connect's ``__connect.errors.*``, the share group's
    ``__dlq.errors.*``, headerless ones as ``unknown``); a share-group dead letter, which names no exception
    class, is counted under ``<share-group: reason>``. Headers present but unreadable are counted by name
    (``totals.unreadable_headers``). Never payloads.

    When there are new records, each ``on_dlt`` notifier is called once with the summary in
    ``context["kafka_retry_summary"]``; a notifier that raises is logged and fails nothing. Only
    after the notifiers were called is the watch group committed, so a run that dies before that
    reports the same records again next time; no new records means no notification. The summary
    is the task's return value (XCom). DLT records are only read: nothing is moved or deleted. The
    first run of a new watch group reports everything the DLTs hold.

    :param topology: a :class:`~airflow_kafka_retry.policy.topology.model.Topology` or the path of its
        YAML file. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param on_dlt: a notifier or a list of them: ``BaseNotifier`` instances (Slack, SMTP, ...) or
        callables ``f(context)``.
    :param consumer_group: the watch's own group; default ``<group_id>-dlt-watch``. (templated)
    :param coordinate_cap: at most this many record coordinates in the summary (the rest are counted).
    :param scan_timeout: seconds the scan may take. A scan that reaches it stops and the run reports and
        commits what it read (``complete`` false, ``unfinished`` naming the partitions left): the next
        run goes on from there, so a backlog larger than one scan is reported once, over several runs.
        Only a scan that read nothing in that time fails the task (nothing committed).
    :param skip_missing_topics: skip the run when a DLT does not exist yet (the event-mode DAG factory sets
        it: its setup DAG creates them); otherwise a missing DLT fails the run, naming it. A DLT the
        principal may not describe always fails the run (``NotAuthorized``), never skips it. Before the
        scan, one check of the watch's ACLs (``PRECHECK_TIMEOUT_S``) fails a run whose principal lacks one,
        naming it, instead of waiting ``scan_timeout`` for a group coordinator Kafka never names to it.
    """

    template_fields: Sequence[str] = ("topology", "kafka_conn_id", "consumer_group")
    ui_color = "#f7d6d0"

    def __init__(
        self,
        *,
        topology: Topology | str | Path,
        kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
        on_dlt: Notifier | Sequence[Notifier] | None = (),
        consumer_group: str | None = None,
        coordinate_cap: int = 100,
        scan_timeout: float = 120.0,
        skip_missing_topics: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(coordinate_cap, bool) or not isinstance(coordinate_cap, int) or coordinate_cap < 0:
            raise ValueError(f"coordinate_cap must be a non-negative integer, got {coordinate_cap!r}")
        self.topology = str(topology) if isinstance(topology, Path) else topology
        self.kafka_conn_id = kafka_conn_id
        self.on_dlt = normalize_notifiers(on_dlt)
        self.consumer_group = consumer_group
        self.coordinate_cap = coordinate_cap
        self.scan_timeout = scan_timeout
        self.skip_missing_topics = skip_missing_topics
        self._result: dict[str, Any] | None = None  # the last run's summary, for OpenLineage
        self._lineage_server: str | None = None

    def _topology(self) -> Topology:
        return self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)

    def execute(self, context: Context) -> dict[str, Any]:
        # imported here, not when the DAG file is parsed (the DAG processor needs none of them)
        from airflow_kafka_retry.engine.kafka.topic_admin import missing_topics
        from airflow_kafka_retry.engine.scans.dlt_scan import (
            DltWatchSummary,
            commit_offsets,
            scan_new_records,
        )
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
        from airflow_kafka_retry.observability.lineage import lineage_server
        from airflow_kafka_retry.observability.metrics import (
            OTHER,
            dlt_watch_metrics,
            emit,
            exception_tags,
            named_tags,
        )

        topology = self._topology()
        topics = [t.topic for t in topology.dlt_tiers]
        group = self.consumer_group or WATCH_GROUP_TEMPLATE.format(group_id=topology.group_id)
        started = wall_clock_ms()
        assume = {q.topic: q.family for q in topology.dead_letter_queues if q.family is not None}
        summary = DltWatchSummary(group=group, coordinate_cap=self.coordinate_cap, assume=assume)
        kafka_config = KafkaRetryHook(self.kafka_conn_id).kafka_config()
        self._lineage_server = lineage_server(kafka_config)
        parking = topology.parking_topic
        queues = list(topology.dead_letter_queue_topics)
        # one listing for every topic the watch may read (each call lists the cluster)
        absent = set(missing_topics(kafka_config, [*topics, *([parking] if parking else []), *queues]))
        if self.skip_missing_topics and (missing := [t for t in topics if t in absent]):
            raise AirflowSkipException(
                f"{', '.join(missing)} do(es) not exist yet, so no dead letter is there; "
                "the topology's setup DAG (or airflow-kafka-retry topology create-topics) "
                "creates them"
            )
        if parking is not None:
            if parking in absent:  # a topology from before parking: none parked yet
                self.log.info("%s does not exist yet: no parked record to report", parking)
            else:
                topics.append(parking)
        for queue in queues:  # the framework that writes a queue creates it: none of its dead letters yet
            if queue in absent:
                self.log.info("%s does not exist yet: no dead letter of it to report", queue)
            else:
                topics.append(queue)
        if topics:  # a watch that may not read its group would wait out scan_timeout finding its coordinator
            from airflow_kafka_retry.engine.kafka.authorization import require

            require(kafka_config, watch_bindings(topology, group, topics), timeout=PRECHECK_TIMEOUT_S)
        try:
            scan = (
                scan_new_records(kafka_config, topics, group, summary, timeout_s=self.scan_timeout)
                if topics
                else None
            )
        except Exception as exc:
            name_missing_acls(exc, kafka_config, topology, group, topics)
            raise
        totals = bounded_totals(summary)
        result = {
            "kind": "dlt_watch",
            "topology": topology.source,
            "group": group,
            "dlt_topics_watched": topics,
            "dead_letter_queues": [
                {**q.to_dict(), "exists": q.topic not in absent} for q in topology.dead_letter_queues
            ],
            "started_ms": started,
            "finished_ms": wall_clock_ms(),
            "totals": totals,
            "dead_letters": [bound_strings(entry) for entry in summary.dead_letters],
            "dead_letters_truncated": summary.dead_letters_truncated,
            "offsets": scan.ranges() if scan else {},
            "complete": scan.complete if scan else True,
            "unfinished": [f"{t}[{p}]" for t, p in scan.unfinished] if scan else [],
        }
        self._result = result
        admitted = scan.admitted if scan else frozenset()
        tags = exception_tags(topology, summary.dead_lettered, admitted)
        emit(dlt_watch_metrics(topology, summary.by_topic_family_exception, tags))
        if not topics:
            self.log.info(
                "%s has no DLT (dlt_strategy: no_dlt) and no dead-letter queue that exists: nothing to watch",
                topology.source,
            )
            return {**result, "notifiers": {"called": 0, "succeeded": 0}}
        if scan is not None and not scan.complete:
            self.log.warning(
                "the scan reached scan_timeout (%ss) before the end of %s: this run reports and commits the "
                "%s record(s) it read, the next run goes on from there",
                self.scan_timeout,
                ", ".join(f"{t}[{p}]" for t, p in scan.unfinished),
                summary.records,
            )
        if summary.records:
            self.log.warning(
                "%s new record(s) in %s: %s",
                summary.records,
                ", ".join(sorted(summary.dlt_topics)),
                ", ".join(f"{n} x {cls}" for cls, n in totals["dead_lettered"].items()),
            )
            # Airflow's Context is a TypedDict over a plain dict: notify_dlt adds the summary to it
            succeeded = notify_dlt(self.on_dlt, cast("MutableMapping[str, Any]", context), result)
            result["notifiers"] = {"called": len(self.on_dlt), "succeeded": succeeded}
        else:
            self.log.info("no new records in %s since the last watch", ", ".join(topics))
            result["notifiers"] = {"called": 0, "succeeded": 0}
        if scan is not None:  # None only without topics, returned above
            # after the notifiers: never before; with the exception tags admitted so far (the metrics' cap),
            # less the topology's own (always kept), within Kafka's offset metadata limit
            kept = (admitted | set(tags.values())) - {OTHER} - named_tags(topology)
            try:
                commit_offsets(kafka_config, group, scan.next_offsets, bound_metadata_tags(kept))
            except Exception as exc:
                name_missing_acls(exc, kafka_config, topology, group, topics)
                raise
        return result

    # ------------------------------------------------------------------ OpenLineage
    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """Every DLT, the parking topic and the named queues of the topology as inputs (no counts yet)."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """Every DLT as an input with the new records found in it, and the ``kafkaRetry`` run facet."""
        return self._lineage(self._result)

    def _lineage(self, result: dict[str, Any] | None) -> OperatorLineage:
        from airflow_kafka_retry.observability.lineage import connection_server, dlt_watch_lineage

        server = self._lineage_server or connection_server(self.kafka_conn_id)
        topology = self._topology()
        topics = [t.topic for t in topology.dlt_tiers] + list(topology.dead_letter_queue_topics)
        return dlt_watch_lineage(topics, server, result)


def name_missing_acls(
    error: Exception, kafka_config: Mapping[str, Any], topology: Topology, group: str, topics: Sequence[str]
) -> None:
    """
    Add to ``error`` the ACLs the watch's principal lacks, when they explain it.

    The ACLs are those ``engine/kafka/authorization.py`` finds missing.

    A principal that may not read its watch group only times out asking for the committed offsets; the
    error then names the principal, the operation and the group instead.
    """
    from airflow_kafka_retry.engine.kafka.authorization import explain

    if "lacks " in str(error):
        return  # named already
    note = explain(error, kafka_config, watch_bindings(topology, group, topics))
    if note:
        error.args = (f"{error}; {note}", *error.args[1:])


def watch_bindings(topology: Topology, group: str, topics: Sequence[str]) -> list[AclBinding]:
    """The DLT watch role's bindings on ``group`` and on the ``topics`` this run reads."""
    from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings

    watched = {group, *topics}
    scope = AclScope(watch_group=group)
    return [b for b in acl_bindings(topology, scope, roles=["dlt_watch"]) if b.name in watched]


def bounded_totals(summary: DltWatchSummary) -> dict[str, Any]:
    """
    The summary's counts as XCom, the notifiers and the log show them.

    Exception and cause class names come from headers, so they pass the one bound
    (:mod:`~airflow_kafka_retry.policy.headers.bounds`); DLT topics are the topology's own (its DLTs,
    parking topic and named queues) and families one of six names.
    """
    from airflow_kafka_retry.engine.scans.dlt_scan import topic_families

    return {
        "new_records": summary.records,
        "dead_lettered": bound_counts(summary.dead_lettered),
        "causes": bound_counts(summary.causes),
        "dlt_topics": dict(sorted(summary.dlt_topics.items())),
        "families": dict(sorted(summary.families.items())),
        "dlt_topic_families": topic_families(summary.by_topic_family_exception),
        "missing": dict(sorted(summary.missing.items())),
        "unreadable_headers": bound_counts(summary.unreadable),
    }
