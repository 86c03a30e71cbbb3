"""A factory-built tier DAG (schedule mode) through real Airflow: ``airflow dags test`` on SQLite, the
embedded broker.

Records are put on retry-1 from Python with the attempt and due-time headers in Spring's encodings, as a
Spring service's retry topic would hold them: most are due, two (one per partition) are due in an hour.
``dags test`` of the tier DAG must create the missing topics, find the due records, drain them, route the
failures on, commit the tier group right before the not-yet-due records, call the DLT notifier once with the
counts and record asset events carrying the counts. A not-yet-due tier and an idle tier (the main topic's
DAG, ``include_main``) must end their ``dags test`` at once (sensor skipped), not wait in the inline
triggerer.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections import Counter
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics

from tests.support import ledger
from tests.support.factory_dag_files import (
    HANDLER_MODULE,
    dags_test_env,
    kafka_connection,
    write_dag_file,
    write_topology,
)
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
MODES = ("ok", "transient:2", "fatal", "permanent")
COUNT = 20  # due records; plus one not-yet-due record per partition after them


def _produce_tier_records(bootstrap: str, topic: str) -> dict[str, tuple[str, int, int]]:
    """Retry-1 records as a retry topic holds them: id -> (mode, partition, offset)."""
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    records: dict[str, tuple[str, int, int]] = {}

    def delivered(err, msg):
        assert err is None, err
        rid = msg.key().decode()
        records[rid] = (json.loads(msg.value())["mode"], msg.partition(), msg.offset())

    items = [(str(i), MODES[i % len(MODES)], i % PARTITIONS, now - 1000) for i in range(COUNT)]
    items += [(f"later-{p}", "ok", p, now + 3_600_000) for p in range(PARTITIONS)]
    for rid, mode, partition, due in items:
        headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due))]
        producer.produce(
            topic,
            key=rid.encode(),
            value=json.dumps({"id": rid, "mode": mode}).encode(),
            partition=partition,
            headers=headers,
            on_delivery=delivered,
        )
        producer.flush(30)  # in order
    return records


def _query(db: Path, sql: str, *params: object) -> list[tuple]:
    with closing(sqlite3.connect(db)) as con:
        return con.execute(sql, params).fetchall()


def _states(db: Path, dag_id: str) -> list[dict[str, str]]:
    """Task states per run of ``dag_id``, in run order."""
    runs: dict[str, dict[str, str]] = {}
    for run_id, task_id, state in _query(
        db,
        "SELECT ti.run_id, ti.task_id, ti.state FROM task_instance ti JOIN "
        "dag_run dr ON dr.run_id = ti.run_id AND dr.dag_id = ti.dag_id "
        "WHERE ti.dag_id = ? ORDER BY dr.id",
        dag_id,
    ):
        runs.setdefault(run_id, {})[task_id] = state
    return list(runs.values())


def test_factory_dag_drains_a_tier_in_airflow_dags_test(kafka_bootstrap, tmp_path):
    topology_file, topology = write_topology(tmp_path, "fdag")
    main = topology.topic
    retry1, retry2 = (t.topic for t in topology.retry_tiers)
    dlt = topology.dlt_topic
    create_topics(kafka_bootstrap, [main, retry1], PARTITIONS)  # the DAG creates retry-2 and the DLT
    try:
        _run(kafka_bootstrap, tmp_path, topology_file, topology, retry1, retry2, dlt)
    finally:
        delete_topics(kafka_bootstrap, topology_topics(topology))


def _run(kafka_bootstrap, tmp_path, topology_file, topology, retry1, retry2, dlt):
    records = _produce_tier_records(kafka_bootstrap, retry1)
    ledger_file, notify_log = tmp_path / "ledger.txt", tmp_path / "notified.jsonl"
    home = tmp_path / "airflow"
    env = dags_test_env(home, tmp_path, {"kafka_default": kafka_connection(kafka_bootstrap)})
    write_dag_file(
        home / "dags",
        "akr_tiers.py",
        writer=__name__,
        topology_file=topology_file,
        options={"batch_size": 4, "chunk_size": 6},
        tier_overrides={retry2: {"schedule": timedelta(minutes=30)}},
        include_main=True,
        asset_server=kafka_bootstrap.split(",")[0],
        trigger="schedule",
    )

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    seed_metadata_db(env, cwd=REPO)
    done = cli("dags", "reserialize")
    assert done.returncode == 0, done.stderr[-3000:]
    tier1_dag, tier2_dag = f"akr_{retry1}", f"akr_{retry2}"
    run = cli("dags", "test", tier1_dag)
    output = run.stdout + run.stderr
    (tmp_path / "dags-test-1.txt").write_text(output)
    db = home / "airflow.db"
    assert _states(db, tier1_dag) == [
        {"ensure_topics": "success", "wait_for_due": "success", "reprocess": "success"}
    ], output[-5000:]

    # ensure_topics created what was missing, sized after the main topic
    [(ensured,)] = _query(
        db,
        "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'ensure_topics' AND \"key\" = 'return_value'",
        tier1_dag,
    )
    ensured = json.loads(ensured)
    assert (ensured["created"], ensured["existing"], ensured["mismatches"], ensured["partitions"]) == (
        [retry2, dlt, topology.parking_topic],
        [retry1],
        [],
        PARTITIONS,
    )

    # due records processed, failures moved on, the not-yet-due records left where they are
    modes = Counter(mode for rid, (mode, _, _) in records.items() if not rid.startswith("later"))
    processed = ledger_file.read_text().split()
    assert sorted(processed) == sorted(
        rid for rid, (mode, _, _) in records.items() if mode == "ok" and not rid.startswith("later")
    )
    moved = {m.key().decode(): m for m in ledger.read_all(kafka_bootstrap, retry2)}
    assert sorted(moved) == sorted(
        rid for rid, (mode, _, _) in records.items() if mode in ("transient:2", "permanent")
    )
    assert all(H.read_attempts(m.headers()) == 3 for m in moved.values())
    dead = {m.key().decode(): m for m in ledger.read_all(kafka_bootstrap, dlt)}
    assert sorted(dead) == sorted(rid for rid, (mode, _, _) in records.items() if mode == "fatal")
    # the tier group committed up to the first record that is not due yet, on each partition
    group = topology.consumer_group(topology.tier(1))
    later = {p: offset for rid, (_, p, offset) in records.items() if rid.startswith("later")}
    assert ledger.committed(kafka_bootstrap, group, retry1, PARTITIONS) == later

    # the notifier was called once, after the commit, with the run's counts
    notes = [json.loads(line) for line in notify_log.read_text().splitlines()]
    assert len(notes) == 1, notes
    [note] = notes
    totals = note["summary"]["totals"]
    assert (note["dag_id"], note["task_id"]) == (tier1_dag, "reprocess")
    assert totals["drained"] == COUNT
    assert totals["succeeded"] == modes["ok"]
    assert totals["routed"] == {retry2: modes["transient:2"] + modes["permanent"], dlt: modes["fatal"]}
    assert totals["dead_lettered"] == {f"{HANDLER_MODULE}.InvalidOrder": modes["fatal"]}
    assert totals["dlt_topics"] == {dlt: modes["fatal"]}

    # asset events of the run carry the counts: the next tier and the DLT
    events = {
        uri: json.loads(extra) if isinstance(extra, str) else extra
        for uri, extra in _query(
            db, "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        )
    }
    server = kafka_bootstrap.split(",")[0]
    assert set(events) == {f"kafka://{server}/{retry2}", f"kafka://{server}/{dlt}"}, events
    assert events[f"kafka://{server}/{retry2}"]["records"] == modes["transient:2"] + modes["permanent"], (
        events
    )
    assert events[f"kafka://{server}/{dlt}"]["records"] == modes["fatal"], events

    # retry-2's records are due in 2 h, its schedule is 30 min: the sensor skips, nothing is drained
    run = cli("dags", "test", tier2_dag, timeout=180)
    output = run.stdout + run.stderr
    (tmp_path / "dags-test-2.txt").write_text(output)
    assert _states(db, tier2_dag) == [
        {"ensure_topics": "success", "wait_for_due": "skipped", "reprocess": "skipped"}
    ], output[-5000:]
    assert ledger.committed(
        kafka_bootstrap, topology.consumer_group(topology.tier(2)), retry2, PARTITIONS
    ) == {p: -1001 for p in range(PARTITIONS)}
    # retry-1 again: only records due in an hour (more than its 30 s schedule): skipped as well
    run = cli("dags", "test", tier1_dag, timeout=180)
    assert _states(db, tier1_dag)[-1] == {
        "ensure_topics": "success",
        "wait_for_due": "skipped",
        "reprocess": "skipped",
    }, (run.stdout + run.stderr)[-5000:]
    # the main topic's DAG (include_main): nothing pending at all, skipped at once
    main_dag = f"akr_{topology.topic}"
    run = cli("dags", "test", main_dag, timeout=180)
    assert _states(db, main_dag) == [
        {"ensure_topics": "success", "wait_for_due": "skipped", "reprocess": "skipped"}
    ], (run.stdout + run.stderr)[-5000:]
    assert len(notify_log.read_text().splitlines()) == 1
