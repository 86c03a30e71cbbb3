"""SparkReprocessTierOperator through real Airflow: ``airflow dags test`` on a SQLite metadata DB, real spark-submit.

Airflow runs in a subprocess with its own ``AIRFLOW_HOME`` (the test process may have imported
Airflow with another configuration already); connections come from ``AIRFLOW_CONN_*`` variables
in JSON form, as a deployment would set them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.test_spark_app import PARTITIONS, SPARK_CONF, write_topology
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).parents[2]
COUNT = 140
SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"

DAG_FILE = '''
"""Written by tests/integration/test_spark_operator_dag.py."""
import json
import sys
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

TOPOLOGY = {topology!r}
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
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {
            "bootstrap.servers": kafka_bootstrap, "sasl.username": "svc", "sasl.password": SECRET}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        "AKR_LEDGER": ledger_file,
        "SPARK_LOCAL_IP": "127.0.0.1",
    })
    return env


def _json_lines(stdout: str) -> list:
    """The JSON document an ``airflow ... -o json`` command printed (Airflow may print warnings first)."""
    return next(json.loads(line) for line in stdout.splitlines() if line.startswith("["))


def test_operator_reprocesses_a_tier_through_airflow(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = write_topology(ledger.make_topology("dag"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    out = tmp_path / "out"
    out.mkdir()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_spark_reprocess.py"
    dag_file.write_text(textwrap.dedent(DAG_FILE.format(topology=str(tmp_path / "topology.yaml"), out=str(out),
                                                         conf=SPARK_CONF)))
    airflow = str(Path(sys.executable).with_name("airflow"))

    migrate = subprocess.run([airflow, "db", "migrate"], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    reserialize = subprocess.run([airflow, "dags", "reserialize"], env=env, cwd=REPO, capture_output=True,
                                 text=True, timeout=300)
    assert reserialize.returncode == 0, reserialize.stderr[-3000:]
    run = subprocess.run([airflow, "dags", "test", "akr_spark_reprocess"], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    output = run.stdout + run.stderr
    (tmp_path / "airflow-output.txt").write_text(output)  # kept for debugging a failure
    runs = subprocess.run([airflow, "dags", "list-runs", "akr_spark_reprocess", "-o", "json"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    [dag_run] = _json_lines(runs.stdout)
    listed = subprocess.run([airflow, "tasks", "states-for-dag-run", "akr_spark_reprocess", dag_run["run_id"],
                             "-o", "json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    states = {row["task_id"]: row["state"] for row in _json_lines(listed.stdout)}
    assert states == {"reprocess_main": "success", "record": "success", "bad_handler": "failed"}, output[-5000:]
    # the summary went to XCom and says what happened to the main topic
    summary = json.loads((out / "xcom.json").read_text())
    assert summary["engine"] == "spark" and summary["status"] == "ok" and summary["tier"] == 0
    modes = Counter(mode for mode, _, _ in inputs.records.values())
    totals = summary["totals"]
    assert totals["drained"] == COUNT
    assert totals["succeeded"] == modes["ok"]
    assert totals["routed"] == {
        topology.tier(1).topic: modes["transient:1"] + modes["transient:2"] + modes["permanent"],
        topology.dlt_topic: modes["fatal"] + modes["bad-json"],
    }
    assert (out / "results" / "reprocess_main.json").exists(), "templated result_path not used"
    # the bad handler failed with a readable reason, before anything was read
    assert "the Spark application refused to start: handler 'tests.support.no_such_handler:handle': " \
           "cannot import module 'tests.support.no_such_handler'" in output
    # the Kafka password is nowhere in what Airflow printed (task logs, spark-submit output) nor in XCom
    assert SECRET not in output
    assert SECRET not in json.dumps(summary)
    # bad_handler used the default result path (keyed by DAG and run under the temp folder)
    shutil.rmtree(Path(tempfile.gettempdir()) / "airflow-kafka-retry" / "akr_spark_reprocess", ignore_errors=True)
