"""``RedriveOperator``: one round of one of a topology's scheduled redrive policies (``redrive:``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowSkipException
from airflow.sdk import BaseOperator

from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID
from airflow_kafka_retry.operators.supervisor_watch import stop_when_supervisor_dies
from airflow_kafka_retry.policy.redrive.rounds import due
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_retry.policy.redrive.policies import RedrivePolicy

log = logging.getLogger(__name__)


class RedriveOperator(BaseOperator):
    """
    Run the round of the redrive policy ``policy`` of the topology at this DAG run's time.

    The round (:mod:`airflow_kafka_retry.dlt.redrive`) redrives the dead letters the policy selects
    (exception, original topic, dead-lettered ``after`` ago) from the parking topic and the DLT to the
    policy's target at its rate, and parks those already redriven ``max_redrives`` times; each record once,
    with its replay log entry, in the replay id ``redrive.<run time>.<policy>``. A retry of the task resumes
    the same round. A round stopped (``dlt replay-stop``, or its rate reaching the task's
    ``execution_timeout``) ends the task successfully with ``status: stopped``: the next round takes the
    rest. The result (counts, each pass's moves by coordinates, never payloads) is the task's XCom.

    :param topology: path of the topology YAML, or a :class:`Topology`. (templated)
    :param policy: the policy's ``name`` in the topology's ``redrive``. (templated)
    :param kafka_conn_id: the Kafka connection (the replay role's). (templated)
    :param period: the DAG's schedule, when several policies of different ``every`` share it: a scheduled run
        skips the policy unless its ``every`` slice began since the previous tick (a manual run never skips).
    :param dry_run: move nothing; report what the round would move. (templated)
    :param chunk_size: records per Kafka transaction (at the policy's rate, at most a quarter second's worth).
    :param move_cap: at most this many moves listed per pass in the result.
    """

    template_fields: Sequence[str] = ("topology", "kafka_conn_id", "policy", "redrive_dry_run")

    def __init__(
        self,
        *,
        topology: str | Topology,
        policy: str,
        kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
        period: timedelta | None = None,
        dry_run: bool | str = False,
        chunk_size: int = 100,
        move_cap: int = 1000,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topology = topology
        self.policy = policy
        self.kafka_conn_id = kafka_conn_id
        self.period = period
        self.redrive_dry_run = dry_run  # not ``dry_run``: that name is BaseOperator's method
        self.chunk_size = chunk_size
        self.move_cap = move_cap

    def _policy(self, topology: Topology) -> RedrivePolicy:
        for policy in topology.redrive:
            if policy.name == self.policy:
                return policy
        names = ", ".join(p.name for p in topology.redrive) or "none"
        raise ValueError(
            f"{topology.source}: no redrive policy named {self.policy!r} (its policies: {names})"
        )

    def execute(self, context: Context) -> dict[str, Any]:
        # here, not at the top: a DAG file's parse loads no Kafka client
        from airflow_kafka_retry.dlt.redrive import run_round
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
        from airflow_kafka_retry.operators.replay_dlt import as_flag, run_budget_s

        topology = self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)
        policy = self._policy(topology)
        run = context["dag_run"]
        tick_ms = int(run.run_after.timestamp() * 1000)
        period_ms = None if self.period is None else int(self.period.total_seconds() * 1000)
        scheduled = getattr(run.run_type, "value", run.run_type) == "scheduled"
        if scheduled and period_ms and not due(policy.every_ms, tick_ms, period_ms):
            every = policy.to_dict()["every"]
            raise AirflowSkipException(f"redrive policy {policy.name} (every {every}): no round at this tick")
        kafka_config = KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config()
        ti = context["ti"]
        orphaned: list[str] = []
        with stop_when_supervisor_dies(orphaned.append):
            result = run_round(
                topology,
                kafka_config,
                policy,
                tick_ms=tick_ms,
                dry_run=as_flag(self.redrive_dry_run, "dry_run"),
                chunk_size=self.chunk_size,
                move_cap=self.move_cap,
                max_run_s=run_budget_s(self.execution_timeout),
                stop_now=lambda: orphaned[0] if orphaned else None,
                airflow={"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id},
            )
        if result.status == "stopped":
            log.warning("%s", result.line())
        return result.to_dict()
