"""RetryTierDueSensor and DltWatchOperator through real Airflow: ``airflow dags test`` on SQLite, real broker.

One hand-written DAG, one topology with three retry tiers:

* ``orders-retry-1``: a task of the DAG produces a record due 6 s later, so the sensor must defer;
  ``dags test`` runs the trigger inline, which sleeps until the due time, looks again and fires;
  the sensor succeeds and its XCom reaches a downstream task;
* ``orders-retry-2``: idle, the sensor skips at once;
* ``orders-retry-3``: a record due in an hour and ``max_wait`` of 20 s: the sensor skips instead of
  waiting (``dags test`` applies no deferral timeout: without ``max_wait`` it would wait an hour);
* a fourth sensor on retry-3 with a reprocessing window that stays closed past its max_wait skips too;
* the DLT watch reports a Spring record to a notifier and commits its group.

Airflow runs in a subprocess with its own ``AIRFLOW_HOME``; the Kafka connection comes from
``AIRFLOW_CONN_KAFKA_DEFAULT`` (JSON), as a deployment would set it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.integration.test_spark_operator_dag import _airflow_env, _json_lines, _xcom
from tests.support import ledger
from tests.support.tier_records import produce
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
DUE_IN_MS = 6_000
DAG_ID = "akr_tier_due"

DAG_FILE = '''
"""Written by tests/integration/test_tier_due_sensor_dag.py."""
import json
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor
from airflow_kafka_retry.policy.headers import codec as H

TOPOLOGY = {topology!r}
OUT = {out!r}


def note_dlt(context):
    with open(OUT + "/notified.jsonl", "a") as fh:
        fh.write(json.dumps(context["kafka_retry_summary"]) + "\\n")


with DAG({dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:

    @task
    def produce_soon():
        from confluent_kafka import Producer
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

        due = time.time_ns() // 1_000_000 + {due_in}
        producer = Producer(KafkaRetryHook().kafka_config())
        producer.produce({retry_1!r}, value=b"x", partition=1,
                         headers=[(H.BACKOFF_TIMESTAMP, H.encode_big_integer(due))])
        assert producer.flush(30) == 0
        with open(OUT + "/due.json", "w") as fh:
            json.dump({{"due_ms": due}}, fh)

    wait_due = RetryTierDueSensor(task_id="wait_due", topology=TOPOLOGY, tier="{{{{ params.tier }}}}",
                                  max_wait=timedelta(minutes=2), params={{"tier": 1}})
    wait_idle = RetryTierDueSensor(task_id="wait_idle", topology=TOPOLOGY, tier=2, max_wait=60)
    wait_not_due = RetryTierDueSensor(task_id="wait_not_due", topology=TOPOLOGY, tier=3, max_wait="20s")
    wait_window = RetryTierDueSensor(task_id="wait_window", topology=TOPOLOGY, tier=3, window={window!r},
                                     timezone="Europe/Berlin", max_wait=timedelta(seconds=20))

    @task
    def record(value):
        with open(OUT + "/xcom.json", "w") as fh:
            json.dump(value, fh)

    produce_soon() >> wait_due
    record(wait_due.output)
    DltWatchOperator(task_id="watch_dlt", topology=TOPOLOGY, on_dlt=[note_dlt])
'''


def _closed_window() -> str:
    """A one-hour window (Berlin time) that opens about 6 hours from now: closed for the whole test."""
    berlin = datetime.now(UTC).astimezone(ZoneInfo("Europe/Berlin"))
    start = (berlin + timedelta(hours=6)).replace(minute=0)
    return f"{start:%H}:00-{(start + timedelta(hours=1)):%H}:00"


def test_tier_due_sensor_and_dlt_watch_through_airflow(kafka_bootstrap, tmp_path):
    topic = unique_topic("due-dag")
    path = tmp_path / "topology.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
                "group_id": f"{topic}-svc",
                "attempts": 4,
                "backoff": {"kind": "fixed", "delay": "1h"},
            }
        )
    )
    topology = load_topology(path)
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=2)
    retry_1, retry_2, retry_3 = (topology.tier(i).topic for i in (1, 2, 3))
    now = time.time_ns() // 1_000_000
    produce(kafka_bootstrap, retry_3, [(0, now + 3_600_000)])
    produce(
        kafka_bootstrap,
        topology.dlt_topic,
        [(1, None)],
        extra_headers=[
            ("kafka_dlt-original-topic", topic.encode()),
            ("kafka_dlt-original-partition", H.encode_int32(1)),
            ("kafka_dlt-original-offset", H.encode_int64(12)),
            ("kafka_dlt-exception-fqcn", b"com.acme.Declined"),
        ],
    )
    out = tmp_path / "out"
    out.mkdir()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger.ledger_path(tmp_path))
    secret = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["sasl.password"]
    window = _closed_window()
    (Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{DAG_ID}.py").write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(path),
                out=str(out),
                dag_id=DAG_ID,
                due_in=DUE_IN_MS,
                retry_1=retry_1,
                window=window,
            )
        )
    )

    seed_metadata_db(env, cwd=REPO)

    def airflow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    reserialize = airflow("dags", "reserialize")
    assert reserialize.returncode == 0, reserialize.stderr[-3000:]
    # the subprocess timeout is the hang check: retry-3's record is due in an hour
    run = airflow("dags", "test", DAG_ID, timeout=600)
    output = run.stdout + run.stderr
    (tmp_path / "airflow-output.txt").write_text(output)

    runs = airflow("dags", "list-runs", DAG_ID, "-o", "json")
    [dag_run] = _json_lines(runs.stdout)
    listed = airflow("tasks", "states-for-dag-run", DAG_ID, dag_run["run_id"], "-o", "json")
    states = {row["task_id"]: row["state"] for row in _json_lines(listed.stdout)}
    assert states == {
        "produce_soon": "success",
        "wait_due": "success",
        "record": "success",
        "wait_idle": "skipped",
        "wait_not_due": "skipped",
        "wait_window": "skipped",
        "watch_dlt": "success",
    }, output[-6000:]

    # the due tier: deferred, the trigger ran inline and fired once the record was due, not before
    assert "running trigger in line" in output, output[-6000:]
    due_ms = json.loads((out / "due.json").read_text())["due_ms"]
    value = json.loads((out / "xcom.json").read_text())
    assert value["topic"] == retry_1
    assert value["tier"] == 1
    assert value["group"] == topology.consumer_group(topology.tier(1))
    assert value["due_partitions"] == [1]
    assert value["earliest_due_ms"] == due_ms
    assert value["checked_at_ms"] >= due_ms
    # the idle tier and the not-yet-due tier skipped with their reasons, without waiting an hour
    assert f"{retry_2} (group {topology.consumer_group(topology.tier(2))}): nothing is pending" in output
    assert (
        f"{retry_3} (group {topology.consumer_group(topology.tier(3))}): records are pending but not due yet"
        in output
    )
    assert "after the wait limit" in output
    assert f"the reprocessing window {window} Europe/Berlin is closed" in output

    # the DLT watch told the notifier once and committed its group
    [notified] = [json.loads(line) for line in (out / "notified.jsonl").read_text().splitlines()]
    assert notified["totals"]["dead_lettered"] == {"com.acme.Declined": 1}
    assert notified["dead_letters"][0]["topic"] == topic
    assert notified["dead_letters"][0]["offset"] == 12
    watch_group = f"{topology.group_id}-dlt-watch"
    assert ledger.committed(kafka_bootstrap, watch_group, topology.dlt_topic, 2) == {0: -1001, 1: 1}
    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    [watched] = _xcom(db, DAG_ID, "watch_dlt", "return_value")
    assert watched["notifiers"] == {"called": 1, "succeeded": 1}

    # no secret in what Airflow printed or stored (XCom, rendered fields, trigger rows)
    assert secret not in output
    with closing(sqlite3.connect(db)) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in ("xcom", "rendered_task_instance_fields", "trigger", "task_instance"):
            assert table in tables
            assert secret not in repr(con.execute(f"SELECT * FROM {table}").fetchall()), table
