"""The demo's retry path is one topology DAG; its progress counts a tier by that tier's task (no broker)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest

from airflow_kafka_retry.demo.deployment import prepare
from airflow_kafka_retry.demo.progress import task_runs, xcom_summaries


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("demo"), topic="orders", bootstrap="127.0.0.1:9092")


def test_the_demo_dag_file_builds_one_dag_for_the_topology_and_the_replay_dag(deployment):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", str(deployment.home))
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(deployment.home / "dags"))
    assert bag.import_errors == {}
    assert (deployment.dag_id, deployment.replay_dag_id) == (
        "kafka_retry__orders",
        "kafka_dlt_replay__orders",
    )
    assert set(bag.dags) == {deployment.dag_id, deployment.replay_dag_id}
    dag = bag.dags[deployment.dag_id]
    tasks = [deployment.task_id(tier) for tier in deployment.tiers]
    assert tasks == ["main", "retry_1", "retry_2"]
    assert (deployment.setup_task, deployment.watch_task) == ("ensure_topics", "watch_dlt")
    assert {t.task_id for t in dag.tasks} == {*tasks, deployment.setup_task, deployment.watch_task}
    for tier, task_id in zip(deployment.tiers, tasks, strict=True):
        assert dag.get_task(task_id).tier == tier.index
    assert json.loads(deployment.lanes_conf("retry_1")) == {"lanes": ["retry_1"]}


def _metadata(path, task_instances, xcoms):
    """A SQLite file with just the columns of ``task_instance`` and ``xcom`` the demo reads."""
    with closing(sqlite3.connect(path)) as con:
        con.execute("CREATE TABLE task_instance (dag_id, run_id, task_id, state)")
        con.execute("CREATE TABLE xcom (dag_id, run_id, task_id, key, value)")
        con.executemany("INSERT INTO task_instance VALUES (?, ?, ?, ?)", task_instances)
        con.executemany("INSERT INTO xcom VALUES (?, ?, ?, ?, ?)", xcoms)
        con.commit()
    return f"sqlite:///{path}"


def test_a_tier_counts_the_runs_its_task_ran_in_not_those_that_skipped_it(tmp_path):
    dag = "kafka_retry__orders"
    url = _metadata(
        tmp_path / "airflow.db",
        [
            (dag, "r1", "due", "success"),
            (dag, "r1", "ensure_topics", "success"),
            (dag, "r1", "main", "skipped"),
            (dag, "r2", "main", "success"),
            (dag, "r2", "retry_1", "skipped"),
            (dag, "r3", "main", "failed"),
            (dag, "r3", "retry_1", "running"),
            (dag, "r4", "main", None),  # its due has not decided yet
            (dag, "r4", "retry_1", "upstream_failed"),  # its due failed
            ("kafka_retry__other", "r1", "main", "success"),
        ],
        [],
    )
    runs = task_runs(url, dag)
    assert runs["main"] == (2, 0)
    assert runs["retry_1"] == (1, 1)
    assert "retry_2" not in runs
    assert task_runs(f"sqlite:///{tmp_path / 'missing.db'}", dag) == {}


def test_the_run_summaries_are_those_of_the_tier_tasks_of_the_topology_dag(tmp_path):
    dag = "kafka_retry__orders"
    summary = {"totals": {"drained": 3, "succeeded": 2, "routed": {"orders-retry-1": 1}}}
    url = _metadata(
        tmp_path / "airflow.db",
        [],
        [
            (dag, "r1", "main", "return_value", json.dumps(json.dumps(summary))),  # JSON in JSON (SQLite)
            (dag, "r2", "retry_1", "return_value", json.dumps(summary)),
            (dag, "r2", "due", "return_value", json.dumps(["retry_1"])),
            (dag, "r3", "watch_dlt", "return_value", json.dumps(summary)),
            ("kafka_retry__other", "r1", "main", "return_value", json.dumps(summary)),
        ],
    )
    got = xcom_summaries(url, dag, ["main", "retry_1", "retry_2"])
    assert sorted((task, run) for task, run, _ in got) == [("main", "r1"), ("retry_1", "r2")]
    assert all(s == summary for _, _, s in got)
    assert xcom_summaries(url, dag, []) == []
