"""The example DAGs users copy import cleanly in a real DagBag."""

from __future__ import annotations

from pathlib import Path

DAGS = Path(__file__).parents[2] / "dags"


def test_example_dags_load_without_import_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(DAGS))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.dags.get("orders_retry_1_spark")
    assert dag is not None
    [task] = dag.tasks
    assert (task.tier, task.handler, task.kafka_conn_id) == (1, "handlers.orders:handle", "kafka_default")
    assert dag.max_active_runs == 1


def test_example_replay_dag_is_a_manual_form_with_dry_run_on(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(DAGS))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "example_dlt_replay.py"))
    assert bag.import_errors == {}
    dag = bag.dags["kafka_dlt_replay__orders"]
    assert type(dag.timetable).__name__ == "NullTimetable", "the replay DAG must only run when triggered"
    [task] = dag.tasks
    assert task.task_id == "replay_dlt" and task.kafka_conn_id == "kafka_default"
    params = dag.params.dump()
    assert params["dry_run"] is True and params["dlt"] is None
    assert {"exception", "original_topic", "since", "until", "key", "partition", "offsets", "limit", "to",
            "transform", "replay_id"} <= set(params)
