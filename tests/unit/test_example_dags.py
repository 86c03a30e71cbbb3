"""The example DAGs users copy import cleanly in a real DagBag."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).parents[2] / "dags"


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow")))
        mp.syspath_prepend(str(DAGS))
        from airflow.dag_processing.dagbag import DagBag

        yield DagBag(dag_folder=str(DAGS))


def test_every_example_dag_file_imports_without_errors(bag):
    assert bag.import_errors == {}
    files = {Path(dag.fileloc).name for dag in bag.dags.values()}
    assert files == {p.name for p in DAGS.glob("*.py")}, "a DAG file defines no DAG"


def test_spark_example(bag):
    dag = bag.dags["orders_retry_1_spark"]
    [task] = dag.tasks
    assert (task.tier, task.handler, task.kafka_conn_id) == (1, "handlers.orders:handle", "kafka_default")
    assert dag.max_active_runs == 1


def test_factory_example_builds_the_orders_topology_as_one_dag(bag):
    ids = {d for d in bag.dags if d.startswith("kafka_retry__orders")}
    assert ids == {"kafka_retry__orders"}
    dag = bag.dags["kafka_retry__orders"]
    assert type(dag.timetable).__name__ == "AssetOrTimeSchedule"  # event-driven, weekly sweep
    watched = dag.timetable.asset_condition
    assert watched.uri == "kafka-retry-topology://kafka_default/orders"
    [watcher] = watched.watchers
    assert type(watcher.trigger).__name__ == "TopologyDueEventTrigger"
    lanes = {lane["name"]: lane for lane in watcher.trigger.lanes}
    assert list(lanes) == ["retry_1", "retry_2", "retry_3", "watch_dlt"]
    assert lanes["retry_3"]["window"] == "01:00-05:00"
    assert {t.task_id for t in dag.tasks if not t.upstream_task_ids} == {"ensure_topics", *lanes}
    assert all(t.owner == "orders-team" and t.retries >= 1 for t in dag.tasks)
    assert all(t.max_active_tis_per_dag == 1 for t in dag.tasks)
    first = dag.get_task("retry_1")
    assert sorted(a.uri for a in first.outlets) == [
        "kafka://kafka:9092/orders-dlt",
        "kafka://kafka:9092/orders-parking",
        "kafka://kafka:9092/orders-retry-2",
        "kafka://kafka:9092/orders-validation-dlt",
    ]
    assert [type(n).__name__ for n in first.on_dlt] == ["DltLogNotifier"]
    night = dag.get_task("retry_3")
    assert (night.window, night.timezone) == ("01:00-05:00", "Europe/Berlin")


def test_folder_example_builds_every_topology_of_its_folder(bag):
    built = {
        d for d, dag in bag.dags.items() if Path(dag.fileloc).name == "example_retry_topologies_folder.py"
    }
    assert built == {"kafka_retry__payments", "kafka_retry__shipments"}
    dag = bag.dags["kafka_retry__shipments"]
    assert {t.task_id for t in dag.tasks} == {
        "ensure_topics",
        "retry_1",
        "retry_2",
        "retry_3",
        "watch_dlt",
    }
    assert dag.get_task("retry_1").topology == str(DAGS / "topology_folder" / "shipments.yaml")
    assert "platform" in dag.tags
    assert dag.get_task("retry_1").retries == 1


def test_hand_composed_example(bag):
    tier = bag.dags["orders_retry_1_hand_composed"]
    assert tier.get_task("wait_for_due").downstream_task_ids == {"reprocess"}
    assert tier.get_task("ensure_topics").downstream_task_ids == {"wait_for_due"}
    follow_up = bag.dags["orders_dlt_follow_up"]
    assert [a.uri for a in follow_up.timetable.asset_condition.objects] == ["kafka://kafka:9092/orders-dlt"]
    reprocess = tier.get_task("reprocess")
    assert sorted(a.uri for a in reprocess.outlets) == [
        "kafka://kafka:9092/orders-dlt",
        "kafka://kafka:9092/orders-parking",
        "kafka://kafka:9092/orders-retry-2",
        "kafka://kafka:9092/orders-validation-dlt",
    ]


def test_example_replay_dag_is_a_manual_form_with_dry_run_on(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(DAGS))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "example_dlt_replay.py"))
    assert bag.import_errors == {}
    dag = bag.dags["kafka_dlt_replay__orders"]
    assert type(dag.timetable).__name__ == "NullTimetable", "the replay DAG must only run when triggered"
    [task] = dag.tasks
    assert task.task_id == "replay_dlt"
    assert task.kafka_conn_id == "kafka_default"
    params = dag.params.dump()
    assert params["dry_run"] is True
    assert params["dlt"] is None
    assert {
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
        "replay_id",
    } <= set(params)
    assert task.transforms == {"add_default_customer": "handlers.replay_fixes:add_default_customer"}
    assert dag.params.get_param("transform").schema["enum"] == [None, "add_default_customer"]
    assert task.allowed_targets == []
