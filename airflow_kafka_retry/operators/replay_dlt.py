"""``ReplayDltOperator``: replay records of a DLT (or the parking topic), exactly once, with audit headers."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
from airflow_kafka_retry.observability.lineage import lineage_server
from airflow_kafka_retry.operators.supervisor_watch import stop_when_supervisor_dies
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

log = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._:+-]")


def default_replay_id(context: Context) -> str:
    """``<dag>.<run>.<task>[.<map index>]``: a retry of the task resumes the same replay."""
    ti = context["ti"]
    parts = [ti.dag_id, ti.run_id, ti.task_id]
    map_index = getattr(ti, "map_index", -1)
    if map_index is not None and map_index >= 0:
        parts.append(str(map_index))
    return _UNSAFE.sub("_", ".".join(str(p) for p in parts))[:200]


def _run_of(context: Context) -> dict[str, Any]:
    """The DAG, run and task of the replay, for its status."""
    ti = context["ti"]
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id}


def as_flag(value: Any, name: str) -> bool:
    """A boolean from a bool or its rendered text (``True``/``false``/``1``/``0``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "", "none"):
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


def run_budget_s(timeout: timedelta | None) -> float | None:
    """The seconds a task may run: its ``execution_timeout`` less a margin to end cleanly (None: no limit)."""
    return None if timeout is None else max(1.0, timeout.total_seconds() - 10.0)


def _unset(value: Any) -> Any:
    """Empty form fields and non-native renderings of None mean 'not given'."""
    return None if value in ("", "None", [], ()) else value


class ReplayDltOperator(BaseOperator):
    """
    Replay DLT records to their original topic (or another target), each exactly once.

    The same operation as ``airflow-kafka-retry dlt replay`` (see :mod:`airflow_kafka_retry.dlt.replay`):
    filtered records are copied to the target with audit headers (DLT coordinates, replay id, time)
    and a fresh attempt count, each copy committed in one Kafka transaction with its entry in the
    ``<dlt>-replay-log`` topic, so no later replay moves it again. A record that fails again after
    the replay ends in the topology's parking topic, not the DLT. Bad input (filter, topic,
    transform, target) fails the task before anything moves. A dry run moves nothing and lists
    every move it would make in the task log and the summary.

    The summary (counts and moves by coordinates, never payloads) is the task's return value (XCom).
    If the replay stops part way (fenced by another replay of the DLT, a failed transaction), the task
    fails and the partial summary is pushed under the key ``summary``; a retry of the task resumes
    the same replay (the default replay id is per task of a run) and moves the rest, each record once.

    :param topology: path of the topology YAML, or a :class:`Topology`. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param dlt: a DLT of the topology or ``parking``; default: the topology's DLT. (templated)
    :param exception: exception class(es), dotted; subclasses match where already loaded (a filter never
        imports). (templated)
    :param original_topic: original topic(s) of the records. (templated)
    :param since: failed at or after: epoch ms, ISO-8601 (UTC) or a duration ago (``2h``). (templated)
    :param until: failed at or before, same forms. (templated)
    :param key: record key(s), UTF-8. (templated)
    :param partition: DLT partition(s): an int, a list, or ``"0,2"``. (templated)
    :param offsets: DLT offsets ``A-B`` (inclusive), ``A-`` or ``A``. (templated)
    :param limit: at most this many records, oldest first. (templated)
    :param to: ``main``, ``first-tier`` or a topic; default: each record's original topic. (templated)
    :param transform: the name of one of ``transforms``, editing each record (it returns None to leave a
        record out); a name not in ``transforms`` fails the task before anything is read. (templated)
    :param dry_run: move nothing; report what would move. (templated)
    :param replay_id: default ``<dag>.<run>.<task>``, so a retried task resumes its replay. (templated)
    :param transforms: the transforms this task may run, chosen by the DAG author: name ->
        ``package.module:function``. Whoever triggers the run picks one by name; nothing else is imported.
    :param allowed_targets: topics beyond the topology's main topic and retry tiers that records may be
        replayed to (with ``to`` or by their original-topic header); by default only those.
    :param chunk_size: records per Kafka transaction (with a rate: at most a quarter of a second's worth).
    :param rate: move at most this many records per second: ``N/s``, ``N`` or a number; a rate of 0, a
        negative one or not a number fails the task before anything is read. Default: as fast as Kafka
        takes them. With an ``execution_timeout``, the replay stops cleanly at the last chunk boundary its
        rate lets it reach in time. (templated)
    :param move_cap: at most this many moves listed in the summary and the log.
    """

    template_fields: Sequence[str] = (
        "topology",
        "kafka_conn_id",
        "dlt",
        "exception",
        "original_topic",
        "since",
        "until",
        "key",
        "partition",
        "offsets",
        "limit",
        "to",
        "transform",
        "replay_dry_run",
        "replay_id",
        "rate",
    )

    def __init__(
        self,
        *,
        topology: str | Topology,
        kafka_conn_id: str = KafkaRetryHook.default_conn_name,
        dlt: str | None = None,
        exception: str | Sequence[str] | None = None,
        original_topic: str | Sequence[str] | None = None,
        since: Any = None,
        until: Any = None,
        key: str | Sequence[str] | None = None,
        partition: Any = None,
        offsets: str | None = None,
        limit: int | str | None = None,
        to: str | None = None,
        transform: str | None = None,
        dry_run: bool | str = False,
        replay_id: str | None = None,
        transforms: Mapping[str, str] | None = None,
        allowed_targets: Sequence[str] = (),
        chunk_size: int = 100,
        move_cap: int = 1000,
        rate: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.kafka_conn_id = kafka_conn_id
        self.dlt = dlt
        self.exception = exception
        self.original_topic = original_topic
        self.since = since
        self.until = until
        self.key = key
        self.partition = partition
        self.offsets = offsets
        self.limit = limit
        self.to = to
        self.transform = transform
        # not ``dry_run``: that name is BaseOperator's method (render the templates, run nothing)
        self.replay_dry_run = dry_run
        self.replay_id = replay_id
        self.transforms = dict(transforms or {})
        self.allowed_targets = list(allowed_targets)
        self.chunk_size = chunk_size
        self.move_cap = move_cap
        self.rate = rate
        self._source: str | None = None  # the topic replayed from, and what the run did: for OpenLineage
        self._result: dict[str, Any] | None = None
        self._lineage_server: str | None = None

    def request(self) -> ReplayRequest:
        key = _unset(self.key)
        if isinstance(key, int | float):  # a digit-only key rendered as a native number
            key = str(key)
        return ReplayRequest(
            dlt=_unset(self.dlt),
            exception=_unset(self.exception),
            original_topic=_unset(self.original_topic),
            since=_unset(self.since),
            until=_unset(self.until),
            key=key,
            partition=_unset(self.partition),
            offsets=_unset(self.offsets),
            limit=_unset(self.limit),
            to=_unset(self.to),
            transform=_unset(self.transform),
        )

    def execute(self, context: Context) -> dict[str, Any]:
        topology = self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)
        dry_run = as_flag(self.replay_dry_run, "dry_run")
        kafka_config = KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config()
        self._lineage_server = lineage_server(kafka_config)
        orphaned: list[str] = []
        replay = Replay(
            topology,
            kafka_config,
            self.request(),
            replay_id=_unset(self.replay_id) or default_replay_id(context),
            dry_run=dry_run,
            chunk_size=self.chunk_size,
            move_cap=self.move_cap,
            transforms=self.transforms,
            allowed_targets=self.allowed_targets,
            stop_now=lambda: orphaned[0] if orphaned else None,
            rate=_unset(self.rate),
            max_run_s=run_budget_s(self.execution_timeout),
            airflow=_run_of(context),
        )
        self._source = replay.source
        log.info(
            "replay %s of %s%s",
            replay.replay_id,
            replay.source,
            " (dry run: nothing is moved)" if dry_run else "",
        )
        try:
            # a try that outlives its supervisor stops at once, its chunk aborted: the next try resumes the
            # same replay id, and must not run beside this one until one fences the other
            with stop_when_supervisor_dies(orphaned.append):
                summary = replay.run()
        except ReplayAbortedError:
            if replay.summary is not None:  # what moved before the failure; a rerun of the task resumes it
                self._result = {**replay.summary.to_dict(), "status": "failed"}
                context["ti"].xcom_push(key="summary", value=replay.summary.to_dict())
            raise
        for line in summary.lines():
            log.info("%s", line)
        if summary.status == "stopped":  # not failed: a retry of the task must not resume it by itself
            log.warning("replay %s stopped: %s", summary.replay_id, summary.error)
        self._result = summary.to_dict()
        return self._result

    # ------------------------------------------------------------------ OpenLineage
    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The DLT (or parking topic) replayed from, as the input."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The DLT in; each topic records were moved to out, with its count; the ``kafkaRetry`` run facet."""
        return self._lineage(self._result)

    def _lineage(self, result: dict[str, Any] | None) -> OperatorLineage:
        from airflow_kafka_retry.observability.lineage import connection_server, replay_lineage

        server = self._lineage_server or connection_server(self.kafka_conn_id)
        return replay_lineage(self._source or self._source_topic(), server, result)

    def _source_topic(self) -> str:
        """The topic this replay reads, before it ran: the ``dlt`` parameter resolved by the topology."""
        from airflow_kafka_retry.dlt.replay_targets import source_topic

        topology = self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)
        return source_topic(topology, _unset(self.dlt))
