"""Event mode's topology DAG through real Airflow: ``airflow dags test`` on SQLite, the real broker.

``dags test`` involves no watcher: a run's conf names the lanes its ``due`` branch runs (as the Retry tiers
view's button does), the others are skipped; a run naming none runs every lane. Checked: a tier run before
its topic exists is skipped; ``ensure_topics`` creates the missing topics; ``retry_1`` drains the due
records of retry-1, routes the failures and commits right before the not-yet-due ones; ``watch_dlt``
reports the dead letters; the topology's one watcher is registered in the metadata DB with the
connection id only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics

from tests.integration.test_factory_dag import (
    COUNT,
    MODES,
    PARTITIONS,
    _produce_tier_records,
    _query,
    _states,
)
from tests.support import ledger
from tests.support.factory_dag_files import dags_test_env, kafka_connection, write_dag_file, write_topology
from tests.support.trigger_rows import trigger_kwargs
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]


def test_event_mode_dags_in_airflow_dags_test(kafka_bootstrap, tmp_path, request):
    topology_file, topology = write_topology(tmp_path, "edag")
    main = topology.topic
    retry1, retry2 = (t.topic for t in topology.retry_tiers)
    dlt = topology.dlt_topic
    create_topics(kafka_bootstrap, [main, retry1], PARTITIONS)  # the setup DAG creates the others
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    records = _produce_tier_records(kafka_bootstrap, retry1)
    ledger_file, notify_log = tmp_path / "ledger.txt", tmp_path / "notified.jsonl"
    home = tmp_path / "airflow"
    env = dags_test_env(home, tmp_path, {"kafka_default": kafka_connection(kafka_bootstrap)})
    write_dag_file(home / "dags", "akr_events.py", writer=__name__, topology_file=topology_file)

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    dag_id = f"akr_{main}"

    def dags_test(*lanes: str) -> str:
        conf = ["--conf", json.dumps({"lanes": list(lanes)})] if lanes else []
        run = cli("dags", "test", dag_id, *conf, timeout=300)
        return (run.stdout + run.stderr)[-30000:]  # every lane task logs its gate

    def last_run() -> dict[str, str]:
        return _states(db, dag_id)[-1]

    seed_metadata_db(env, cwd=REPO)
    done = cli("dags", "reserialize", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    db = home / "airflow.db"

    # the topology's one watcher is registered with its kwargs: the connection id, never its configuration
    triggers = _query(
        db, "SELECT t.classpath, t.kwargs FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id"
    )
    assert [c.rsplit(".", 1)[1] for c, _ in triggers] == ["TopologyDueEventTrigger"], triggers
    [kwargs] = [trigger_kwargs(home, stored) for _, stored in triggers]  # stored encrypted
    assert kwargs["kafka_conn_id"] == "kafka_default", kwargs
    assert kafka_bootstrap not in json.dumps(kwargs), kwargs

    # before the topics exist, a run of a tier whose topic does not exist yet is skipped (nothing is due
    # there); the lanes the run's conf does not name skip themselves (their gate)
    output = dags_test("retry_2")
    assert last_run() == {
        "ensure_topics": "skipped",
        "retry_1": "skipped",
        "retry_2": "skipped",
        "watch_dlt": "skipped",
    }, output
    assert f"{retry2} does not exist yet" in output
    # the first task to start skipped the others through the execution API (its gate), before they started
    assert "not named in this run and not started yet" in output, output
    output = dags_test("watch_dlt")
    assert last_run()["watch_dlt"] == "skipped", output

    output = dags_test("ensure_topics")
    assert last_run()["ensure_topics"] == "success", output
    [(ensured,)] = _query(db, "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'ensure_topics'", dag_id)
    assert json.loads(ensured)["created"] == [retry2, dlt, topology.parking_topic]
    assert set(Producer({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics) >= {
        retry2,
        dlt,
        topology.parking_topic,
    }

    output = dags_test("retry_1")
    assert last_run()["retry_1"] == "success", output
    assert last_run()["retry_2"] == "skipped", output
    processed = ledger_file.read_text().split()
    assert sorted(processed) == sorted(
        rid for rid, (mode, _, _) in records.items() if mode == "ok" and not rid.startswith("later")
    )
    moved = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, retry2))
    assert moved == sorted(
        rid for rid, (mode, _, _) in records.items() if mode in ("transient:2", "permanent")
    )
    dead = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, dlt))
    assert dead == sorted(rid for rid, (mode, _, _) in records.items() if mode == "fatal")
    later = {p: offset for rid, (_, p, offset) in records.items() if rid.startswith("later")}
    assert (
        ledger.committed(kafka_bootstrap, topology.consumer_group(topology.tier(1)), retry1, PARTITIONS)
        == later
    )

    # a run no event started and whose conf names no lane (a sweep) runs every lane
    output = dags_test()
    assert set(last_run().values()) == {"success"}, output
    notes = [json.loads(line) for line in notify_log.read_text().splitlines()]
    watched = [n for n in notes if n["task_id"] == "watch_dlt"]
    assert [n["summary"]["totals"]["new_records"] for n in watched] == [len(dead)]
    assert len(dead) == sum(1 for i in range(COUNT) if MODES[i % len(MODES)] == "fatal")
