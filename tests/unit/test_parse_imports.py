"""Parsing a topology DAG file loads no Kafka client, Spark, engine, OpenLineage or plugin code.

Airflow's DAG processor imports every DAG file in a fresh child process, every 30 s: whatever a DAG
file imports is paid at each parse. Each case parses real DAG files in a fresh interpreter (Airflow's
DagBag, as the DAG processor does) and lists the modules the parse loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.parse_imports import heavy_modules

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
ORDERS = DAGS / "topologies" / "orders.yaml"

#: Parses a plain DAG file first (Airflow itself, its plugins and providers' start-up: what the DAG
#: processor's manager has loaded before it forks a parse), then the DAG file, and lists what that loaded.
PARSE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

DagBag(dag_folder=sys.argv[2])
before = set(sys.modules)
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
                  "modules": sorted(set(sys.modules) - before)}))
"""
PLAIN = """
from airflow.sdk import DAG, Asset
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("plain", schedule=[Asset("s3://bucket/key")]):
    EmptyOperator(task_id="nothing")
"""


def parse(path: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PYTHONPATH=os.pathsep.join([str(REPO), str(DAGS), env.get("PYTHONPATH", "")]),
    )
    plain = home / "plain_dag.py"
    plain.write_text(PLAIN)
    done = subprocess.run(
        [sys.executable, "-c", PARSE, str(path), str(plain)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _generated(tmp_path: Path, case: str) -> Path:
    """``schedule_mode``: the orders topology in schedule mode; ``redrive``: with redrive policies."""
    topology, extra = ORDERS, ", trigger='schedule'"
    if case == "redrive":
        topology, extra = tmp_path / "orders.yaml", ""
        topology.write_text(
            ORDERS.read_text()
            + "redrive: [{exception: [TimeoutError], after: 1h, every: 1h, max_redrives: 3}]\n"
        )
    path = tmp_path / f"{case}.py"
    path.write_text(
        "from airflow_kafka_retry import build_retry_dags\n"
        f"globals().update(build_retry_dags({str(topology)!r}, handler='handlers.orders:handle'{extra}))\n"
    )
    return path


@pytest.mark.parametrize(
    "dag_file",
    [
        DAGS / "example_retry_tiers.py",  # event mode, local engine: the factory's default
        DAGS / "example_retry_topologies_folder.py",
        DAGS / "example_retry_hand_composed.py",
        "schedule_mode",
        "redrive",  # the redrive DAG too
    ],
    ids=lambda p: getattr(p, "stem", p),
)
def test_parsing_a_topology_dag_file_imports_no_kafka_client_spark_engine_or_lineage(dag_file, tmp_path):
    path = _generated(tmp_path, dag_file) if isinstance(dag_file, str) else dag_file
    parsed = parse(path, tmp_path)
    assert parsed["errors"] == {}
    built = ("kafka_retry__orders", "kafka_retry__payments", "-retry-1", "_hand_composed")  # by layout
    assert any(d.endswith(built) for d in parsed["dags"]), parsed["dags"]
    assert heavy_modules(parsed["modules"]) == []
    if dag_file == "redrive":
        assert "kafka_retry__orders__redrive" in parsed["dags"]


def test_the_check_sees_a_dag_file_that_imports_the_kafka_client(tmp_path):
    path = tmp_path / "eager.py"
    path.write_text(
        "import confluent_kafka\n"
        "from airflow_kafka_retry import build_retry_dags\n"
        f"globals().update(build_retry_dags({str(ORDERS)!r}, handler='handlers.orders:handle'))\n"
    )
    parsed = parse(path, tmp_path)
    assert parsed["errors"] == {}
    assert parsed["dags"]
    assert "confluent_kafka" in heavy_modules(parsed["modules"])


def test_the_default_kafka_connection_is_the_kafka_providers():
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID

    assert KafkaBaseHook.default_conn_name == DEFAULT_KAFKA_CONN_ID
