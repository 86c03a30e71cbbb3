"""
A topology's scheduled redrive policies (``redrive:``) as a DAG of their own: ``<topology DAG id>__redrive``.

Not the topology DAG: that one runs when its watcher's asset fires, or on its weekly sweep
(``AssetOrTimeSchedule``), and in schedule mode there is a DAG per tier on its tier's delay; neither
schedule can carry a policy's ``every`` (an hourly policy would run at every wave, or once a week). One DAG
for all the policies of a topology, not one each: every round replays the same DLT and parking topic, whose
replays share a transactional id, so two rounds at once would fence each other. Its tasks
``redrive_<policy>`` run one after another (``trigger_rule="all_done"``: a failed or skipped round does not
hold the next back), one run at a time. Its schedule is the greatest common divisor of the policies'
``every`` (at least ``min_schedule``); a policy with a longer ``every`` skips the ticks that are not its
own (:func:`~airflow_kafka_retry.policy.redrive.rounds.due`). Each task's ``execution_timeout`` defaults to
its policy's ``every``: a round that its rate would hold longer stops cleanly, and the next takes the rest.
This only assembles; nothing here touches Kafka.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.factory.dag_builders import factory_dag

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_kafka_retry.policy.topology.model import Topology

log = logging.getLogger(__name__)

#: The redrive DAG's id: the topology DAG's (``dag_id_template`` formatted with the main topic) plus this.
REDRIVE_SUFFIX = "__redrive"
TASK_PREFIX = "redrive_"


def redrive_period(topology: Topology, min_schedule: timedelta) -> timedelta:
    """The DAG's tick: the greatest common divisor of the policies' ``every``, at least ``min_schedule``."""
    period = timedelta(milliseconds=math.gcd(*(p.every_ms for p in topology.redrive)))
    if period < min_schedule:
        log.warning(
            "%s: redrive policies every %s need a tick that short; ticking every %s (min_schedule) instead, "
            "so their rounds come that much later",
            topology.source,
            period,
            min_schedule,
        )
        return min_schedule
    return period


def redrive_dags(
    path: str,
    topology: Topology,
    dag_id_template: str,
    kafka_conn_id: str,
    min_schedule: timedelta,
    dag_kwargs: Mapping[str, Any],
) -> dict[str, DAG]:
    """
    The redrive DAG, by id (none when the topology has no ``redrive`` policies).

    :param dag_id_template: ``build_retry_dags``'; the DAG's id is it formatted with the main topic, plus
        :data:`REDRIVE_SUFFIX`.
    :param kafka_conn_id: the ``replay`` role's connection.
    """
    if not topology.redrive:
        return {}
    from airflow.sdk import chain

    from airflow_kafka_retry.operators.redrive import RedriveOperator

    period = redrive_period(topology, min_schedule)
    names = ", ".join(p.name for p in topology.redrive)
    description = f"Kafka retry: scheduled redrives of {topology.topic}'s dead letters ({names})"
    kwargs = {"doc_md": _doc(topology, period), **dag_kwargs}
    timeout_given = "execution_timeout" in dict(kwargs.get("default_args") or {})
    dag_id = dag_id_template.format(topic=topology.topic) + REDRIVE_SUFFIX
    with factory_dag(dag_id, period, description, kwargs) as dag:
        tasks = []
        for policy in topology.redrive:
            task_kwargs: dict[str, Any] = {"trigger_rule": "all_done"}
            if not timeout_given:
                task_kwargs["execution_timeout"] = timedelta(milliseconds=policy.every_ms)
            tasks.append(
                RedriveOperator(
                    task_id=f"{TASK_PREFIX}{policy.name}",
                    topology=path,
                    policy=policy.name,
                    kafka_conn_id=kafka_conn_id,
                    period=period,
                    **task_kwargs,
                )
            )
        chain(*tasks)
    return {dag.dag_id: dag}


def _doc(topology: Topology, period: timedelta) -> str:
    rows = ["| task | takes | after | every | max_redrives | rate | to |", "|---|---|---|---|---|---|---|"]
    for policy in topology.redrive:
        d = policy.to_dict()
        takes = ", ".join([*policy.exception, *policy.original_topic])
        rows.append(
            f"| `{TASK_PREFIX}{policy.name}` | {takes} | {d['after']} | {d['every']} | {policy.max_redrives} "
            f"| {f'{policy.rate:g}/s' if policy.rate else 'unpaced'} | {policy.to} |"
        )
    return (
        f"Scheduled redrives of `{topology.topic}`'s dead letters ({topology.source}), every {period}: "
        "each round moves what its policy selects back, each record once, and parks what was redriven "
        "`max_redrives` times. Audit: `airflow-kafka-retry dlt replay-status`.\n\n" + "\n".join(rows)
    )
