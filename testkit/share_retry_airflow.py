"""
Back-off retries of a real share group, run by a real Airflow deployment (the e2e test, ``bench --airflow``).

:func:`share_retries_in_airflow` writes an ``on_due: redeliver`` topology over a fresh source topic and
share group, and a DAG file that builds its DAG with ``build_retry_dags`` and nothing else (no handler, no
``include_main``); it starts Airflow (``sandbox/airflow_stack.py``: api-server, scheduler, dag-processor,
triggerer, LocalExecutor), waits for the topology's watcher to run the DAG's ``ensure_topics``, then
produces the records while a real ``ShareConsumer`` (:class:`~testkit.share_retry.
ShareQueue`) accepts or rejects each delivery as ``plan`` says. Every tier run after that is one the
watcher fired. It returns when every record has ended (accepted, or in the DLT), or when ``deadline_s``
passes (the caller's assertions then say what is missing).
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster, airflow_env
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, create_topics, unique_topic
from testkit.share_groups import DLQ_PREFIX, set_group_configs
from testkit.share_retry import RETRIED_GROUP_CONFIGS, Delivery, ShareQueue

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

DAG_FILE = '''
"""Written by testkit/share_retry_airflow.py."""
from airflow_kafka_retry import build_retry_dags

globals().update(
    build_retry_dags({topology!r}, dag_id_template="sr__{{topic}}", default_args={{"retries": 0}})
)
'''
#: How long the deployment gets to run the DAG's first task (ensure_topics, fired by the watcher).
SETUP_S = 150


@dataclass
class AirflowShareRun:
    """What a run saw: the share consumer's deliveries, and the deployment's task instances."""

    topology: Topology
    dag_id: str
    placed: dict[bytes, tuple[int, int]]  # key -> (partition, offset) of its source record
    deliveries: list[Delivery]
    settled: bool  # every record ended before the deadline
    task_states: list[tuple[str, str, str, str]]  # (run_id, run_type, task_id, state)
    failed_logs: str  # the logs of the DAG's tasks when one failed
    flow_s: float  # from the first record produced to the last record's end


def share_retries_in_airflow(
    bootstrap: str,
    database_url: str,
    workdir: Path,
    *,
    plan: Mapping[bytes, int | None],
    attempts: int,
    backoff: Mapping[str, object],
    repo: Path,
    partitions: int = 2,
    deadline_s: float = 180.0,
) -> AirflowShareRun:
    """
    Run ``plan`` (key -> the round its share consumer accepts it on; None: never) through Airflow.

    :param backoff: the topology's ``backoff`` mapping.
    :param repo: the checkout (the deployment's working directory and ``PYTHONPATH``).
    """
    source, group = unique_topic("orders"), unique_topic("share")
    create_topics(bootstrap, [source], partitions)
    dlq = DLQ_PREFIX + group
    set_group_configs(bootstrap, group, {**RETRIED_GROUP_CONFIGS, "errors.deadletterqueue.topic.name": dlq})
    topology_file = workdir / "share-retries.yaml"
    topology_file.write_text(
        json.dumps(
            {
                "topic": source,
                "group_id": f"{group}-retrier",
                "input": {"family": "share-group", "dlq": dlq},
                "on_due": "redeliver",
                "attempts": attempts,
                "backoff": dict(backoff),
            }
        )
    )
    topology = load_topology(topology_file)
    home = workdir / "airflow"
    env = airflow_env(
        home,
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        pythonpath=[repo],
        database_url=database_url,
    )
    (home / "dags" / "share_retries.py").write_text(
        textwrap.dedent(DAG_FILE.format(topology=str(topology_file)))
    )
    dag_id = f"sr__{source}"

    def decide(key: bytes, attempt: int) -> bool:
        accept_on = plan[key]
        return accept_on is not None and attempt >= accept_on

    with AirflowCluster(home, env, cwd=repo, migrated=True) as cluster:
        # the watcher finds the tiers missing and fires ensure_topics (the DLQ it waits for: the broker's)
        cluster.wait_for_success(dag_id, SETUP_S, task_id="ensure_topics")
        with ShareQueue(bootstrap, group, [source], decide) as queue:
            started = time.monotonic()
            placed = _produce(bootstrap, source, list(plan), partitions)
            wanted = {k for k, v in plan.items() if v is not None}
            never = sum(1 for v in plan.values() if v is None)
            settled = False
            while time.monotonic() - started < deadline_s:
                queue.check()
                cluster.check_alive()
                accepted = {d.key for d in queue.snapshot() if d.accepted}
                if accepted == wanted and _records(bootstrap, str(topology.dlt_topic)) >= never:
                    settled = True
                    break
                time.sleep(0.5)
            flow_s = time.monotonic() - started
            time.sleep(3.0)  # a record wrongly redelivered again would show up now
            deliveries = queue.snapshot()
        states = cluster.query(
            "SELECT t.run_id, r.run_type, t.task_id, t.state FROM task_instance t "
            "JOIN dag_run r ON r.dag_id = t.dag_id AND r.run_id = t.run_id WHERE t.dag_id = ?",
            dag_id,
        )
        failed = any(state == "failed" for *_, state in states)
        logs = cluster.task_log_tail(dag_id, 4000) if failed or not settled else ""
    return AirflowShareRun(
        topology, dag_id, placed, deliveries, settled, [tuple(row) for row in states], logs, flow_s
    )


def _produce(bootstrap: str, topic: str, keys: list[bytes], partitions: int) -> dict[bytes, tuple[int, int]]:
    """Each key's source record, on partitions in turn; where each one landed."""
    from confluent_kafka import Producer

    placed: dict[bytes, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for i, key in enumerate(keys):

        def delivered(err: object, msg: object, key: bytes = key) -> None:
            if err is None:
                placed[key] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        producer.produce(topic, key=key, value=b"v-" + key, partition=i % partitions, on_delivery=delivered)
    if producer.flush(30) or len(placed) < len(keys):
        raise RuntimeError(f"{topic}: {len(placed)} of {len(keys)} source records produced within 30s")
    return placed


def _records(bootstrap: str, topic: str) -> int:
    """The records of ``topic`` (read_committed; 0 while it does not exist)."""
    from airflow_kafka_retry.engine.kafka.clients import TopicsMissing
    from airflow_kafka_retry.engine.kafka.reading import TopicReader

    with TopicReader({"bootstrap.servers": bootstrap}) as reader:
        try:
            count = reader.partitions(topic)
        except TopicsMissing:
            return 0
        return sum(1 for p in range(count) for _ in reader.read(topic, p))


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages, as ``0.9 / 2.9 / 3.8``."""
    return " / ".join(f"{v:.1f}" for v in os.getloadavg())
