"""SparkReprocessTierOperator through real Airflow: ``airflow dags test`` on a SQLite metadata DB, real
spark-submit.

Airflow runs in a subprocess with its own ``AIRFLOW_HOME`` (the test process may have imported
Airflow with another configuration already); connections come from ``AIRFLOW_CONN_*`` variables
in JSON form, as a deployment would set them.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import tempfile
import textwrap
import uuid
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db

from tests.integration.test_spark_app import PARTITIONS, SPARK_CONF, SparkEnvWatcher, describe_process
from tests.support import ledger
from tests.support.warm_airflow import end_all, run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).parents[2]
COUNT = 140
FAIL_COUNT = 4 * PARTITIONS  # records for the task whose partitions fail: 4 per partition
SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"

DAG_FILE = '''
"""Written by tests/integration/test_spark_operator_dag.py."""
import json
import sys
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

TOPOLOGY = {topology!r}
FAIL_TOPOLOGY = {fail_topology!r}
OUT = {out!r}
SPARK_CONF = {conf!r}

with DAG("akr_spark_reprocess", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    main_tier = SparkReprocessTierOperator(
        task_id="reprocess_main",
        topology=TOPOLOGY,
        tier="{{{{ params.tier }}}}",
        handler="tests.support.ledger_handler:indexed",
        value_deserializer="tests.support.ledger_handler:decode",
        result_path=OUT + "/results/{{{{ ti.task_id }}}}.json",
        options={{"batch_size": 20, "chunk_size": 50}},
        conf=SPARK_CONF,
        params={{"tier": 0}},
    )
    bad_handler = SparkReprocessTierOperator(
        task_id="bad_handler",
        topology=TOPOLOGY,
        tier=1,
        handler="tests.support.no_such_handler:handle",
        conf=SPARK_CONF,
        retries=0,
    )
    # every batch (4 records at most) gets BatchFailedError(5, ...): the index is outside the batch,
    # so each partition fails at run time, after the application started and read its records
    failing_partitions = SparkReprocessTierOperator(
        task_id="failing_partitions",
        topology=FAIL_TOPOLOGY,
        tier=0,
        handler="tests.support.ledger_handler:bad_index",
        options={{"batch_size": 4}},
        conf=SPARK_CONF,
        retries=0,
    )

    @task
    def record(summary):
        with open(OUT + "/xcom.json", "w") as fh:
            json.dump(summary, fh)

    record(main_tier.output)
'''


def _airflow_env(tmp_path: Path, kafka_bootstrap: str, ledger_file: str) -> dict[str, str]:
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {
                        "bootstrap.servers": kafka_bootstrap,
                        "sasl.username": "svc",
                        "sasl.password": SECRET,
                    },
                }
            ),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            "AKR_LEDGER": ledger_file,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    return env


def _json_lines(stdout: str) -> list:
    """The JSON document an ``airflow ... -o json`` command printed (Airflow may print warnings first)."""
    return next(json.loads(line) for line in stdout.splitlines() if line.startswith("["))


def _xcom(db: Path, dag_id: str, task_id: str, key: str) -> list:
    """The values (decoded) of one XCom key of one task, read from the metadata DB (``xcom.value`` is
    JSON)."""
    with closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            'SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND "key" = ?', (dag_id, task_id, key)
        ).fetchall()
    return [json.loads(value) for (value,) in rows]


def test_operator_reprocesses_a_tier_through_airflow(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("dag"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    # a second topic, for the task whose partitions fail: records on every partition, nothing committed yet
    fail_topology = ledger.write_topology(ledger.make_topology("dagfail"), tmp_path / "fail-topology.yaml")
    fail_inputs = ledger.produce_inputs(kafka_bootstrap, fail_topology, FAIL_COUNT, PARTITIONS)
    assert {p for _, p, _ in fail_inputs.records.values()} == set(range(PARTITIONS))
    fail_group = fail_topology.consumer_group(fail_topology.tier(0))
    committed_before = ledger.committed(kafka_bootstrap, fail_group, fail_topology.topic, PARTITIONS)
    out = tmp_path / "out"
    out.mkdir()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_spark_reprocess.py"
    dag_file.write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(tmp_path / "topology.yaml"),
                out=str(out),
                fail_topology=str(tmp_path / "fail-topology.yaml"),
                conf=SPARK_CONF,
            )
        )
    )

    def airflow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    seed_metadata_db(env, cwd=REPO)
    reserialize = airflow("dags", "reserialize")
    assert reserialize.returncode == 0, reserialize.stderr[-3000:]
    watcher = SparkEnvWatcher(
        SECRET, scope=str(tmp_path)
    )  # every process's command line and environment, while the DAG runs
    watcher.start()
    try:
        run = airflow("dags", "test", "akr_spark_reprocess", timeout=600)
    finally:
        watcher.stop()
    output = run.stdout + run.stderr
    (tmp_path / "airflow-output.txt").write_text(output)  # kept for debugging a failure
    runs = airflow("dags", "list-runs", "akr_spark_reprocess", "-o", "json", timeout=120)
    [dag_run] = _json_lines(runs.stdout)
    listed = airflow(
        "tasks", "states-for-dag-run", "akr_spark_reprocess", dag_run["run_id"], "-o", "json", timeout=120
    )
    states = {row["task_id"]: row["state"] for row in _json_lines(listed.stdout)}
    assert states == {
        "reprocess_main": "success",
        "record": "success",
        "bad_handler": "failed",
        "failing_partitions": "failed",
    }, output[-5000:]
    # the summary went to XCom and says what happened to the main topic
    summary = json.loads((out / "xcom.json").read_text())
    assert summary["engine"] == "spark"
    assert summary["status"] == "ok"
    assert summary["tier"] == 0
    modes = Counter(mode for mode, _, _ in inputs.records.values())
    totals = summary["totals"]
    assert totals["drained"] == COUNT
    assert totals["succeeded"] == modes["ok"]
    assert totals["routed"] == {
        topology.tier(1).topic: modes["transient:1"] + modes["transient:2"] + modes["permanent"],
        topology.dlt_topic: modes["fatal"] + modes["bad-json"],
    }
    # the templated result_path was used, and the result deleted once read
    result = out / "results" / "reprocess_main.json"
    assert f"summary at {result}" in output, "templated result_path not used"
    assert (out / "results").is_dir(), "the result file outlived the run"
    assert not result.exists(), "the result file outlived the run"
    # bad_handler and failing_partitions used the default: a private folder per run, gone afterwards;
    # nothing under the old predictable <tmp>/airflow-kafka-retry/<dag>/<run>/<task>.json
    private = re.findall(r"summary at (\S*/akr-spark-[^/\s]+)/summary\.json", output)
    assert len(private) == 2, private
    assert len(set(private)) == 2, private
    assert not [p for p in private if os.path.exists(p)]
    assert not (Path(tempfile.gettempdir()) / "airflow-kafka-retry" / "akr_spark_reprocess").exists()
    # the bad handler failed with a readable reason, before anything was read
    assert (
        "the Spark application refused to start: handler 'tests.support.no_such_handler:handle': "
        "cannot import module 'tests.support.no_such_handler'" in output
    )
    # the Kafka password is nowhere in what Airflow printed (task logs, spark-submit output) nor in XCom
    assert SECRET not in output
    assert SECRET not in json.dumps(summary)

    # failing_partitions: the summary went to XCom under "summary" and says every partition failed
    home = Path(env["AIRFLOW_HOME"])
    db = home / "airflow.db"
    [failed] = _xcom(db, "akr_spark_reprocess", "failing_partitions", "summary")
    assert failed["status"] == "failed"
    assert failed["engine"] == "spark"
    assert failed["tier"] == 0
    assert failed["topic"] == fail_topology.topic
    assert failed["group"] == fail_group
    assert failed["totals"]["failed_partitions"] == list(range(PARTITIONS))
    assert failed["totals"]["succeeded"] == 0
    assert failed["totals"]["routed"] == {}
    assert _xcom(db, "akr_spark_reprocess", "failing_partitions", "return_value") == []
    parts = failed["partitions"]
    assert [p["partition"] for p in parts] == list(range(PARTITIONS))
    for p in parts:
        # the handler was called on the partition's records (the bad index is judged against the real batch)
        assert p["status"] == "failed", p
        assert (
            p["error"] == "UserCodeError: handler 'tests.support.ledger_handler:bad_index' raised "
            "BatchFailedError with index 5, but the batch it was given has 4 records (valid: 0..3); first "
            "record "
            f"of the batch: {fail_topology.topic}[{p['partition']}]@0"
        ), p
        assert p["committed_offset"] is None, p
        assert p["succeeded"] == 0, p
    # ... and the task failed with the message naming each failed partition and its error
    assert (
        f"Spark reprocessing of {fail_topology.topic} (tier 0, group {fail_group}) failed on {PARTITIONS} of "
        f"{PARTITIONS} partition(s); other partitions committed their progress" in output
    ), output[-5000:]
    for p in parts:
        assert f"  partition {p['partition']}: {p['error']} (committed up to None)" in output, output[-5000:]
    # nothing was committed for the failing partitions
    assert all(offset < 0 for offset in committed_before.values()), committed_before
    assert ledger.committed(kafka_bootstrap, fail_group, fail_topology.topic, PARTITIONS) == committed_before

    # the Kafka password is in no file under AIRFLOW_HOME: the metadata DB (and its WAL, if any), the
    # config, any log file. (``dags test`` runs tasks in-process: their logs are ``output``, checked above.)
    end_all()  # Airflow ended, as after `airflow dags test`: what it wrote is in the DB file, not its WAL
    files = [p for p in home.rglob("*") if p.is_file()]
    assert db in files, "the DB scan would not see stored text"
    assert fail_topology.topic.encode() in db.read_bytes(), "the DB scan would not see stored text"
    assert not [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    with closing(sqlite3.connect(db)) as con:
        for table, tasks in (
            ("xcom", {"reprocess_main", "failing_partitions"}),
            ("rendered_task_instance_fields", {"reprocess_main", "failing_partitions"}),
        ):
            columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            assert "task_id" in columns, (table, columns)
            rows = [dict(zip(columns, row)) for row in con.execute(f"SELECT * FROM {table}")]
            assert tasks <= {row["task_id"] for row in rows}, (table, rows)
            assert SECRET not in repr(rows), table
    # ... nor in any process's command line while the DAG ran, nor in the environment of the Spark
    # application's processes (the airflow CLI's own environment holds it: the connection comes from
    # AIRFLOW_CONN_KAFKA_DEFAULT, as a deployment would set it)
    assert watcher.spark_submits, "the watcher saw no spark-submit: the process checks below would be vacuous"
    assert watcher.spark_envs_read, "the watcher read no Spark process's environment"
    assert watcher.other_env_hits, (
        "the watcher did not even see the airflow CLI's environment holding the secret"
    )
    assert not watcher.cmdline_hits, watcher.cmdline_hits
    assert not watcher.spark_env_hits, (
        f"the Spark application inherited the Kafka password in its environment: "
        f"{len(watcher.spark_env_hits)} of {len(watcher.spark_envs_read)} Spark processes: "
        f"{sorted(Counter(describe_process(c) for c in watcher.spark_env_hits.values()).items())}"
    )
