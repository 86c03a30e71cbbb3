"""SparkReprocessTierOperator's DLT notifiers and asset events through real Airflow and a real
spark-submit."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db

from tests.integration.test_reprocess_operator_dag import _airflow, _asset_events, _states
from tests.integration.test_spark_app import PARTITIONS, SPARK_CONF
from tests.integration.test_spark_operator_dag import _airflow_env
from tests.support import ledger
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).parents[2]
COUNT = 42

DAG_FILE = '''
"""Written by tests/integration/test_spark_operator_notify_assets.py."""
import json
from datetime import datetime

from airflow.sdk import DAG

from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

OUT = {out!r}


def record_notification(context):
    with open(OUT + "/notified.jsonl", "a") as fh:
        fh.write(json.dumps(context["kafka_retry_summary"]) + "\\n")


with DAG("akr_spark_notify", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    SparkReprocessTierOperator(
        task_id="reprocess_main",
        topology={topology!r},
        tier=0,
        handler="tests.support.ledger_handler:indexed",
        value_deserializer="tests.support.ledger_handler:decode",
        options={{"batch_size": 10, "chunk_size": 20}},
        conf={conf!r},
        on_dlt=[record_notification],
        asset_server={server!r},
        max_run="1h",
    )
'''


def test_spark_operator_notifies_once_and_emits_asset_events(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("sparknote"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    modes = Counter(mode for mode, _, _ in inputs.records.values())
    out = tmp_path / "out"
    out.mkdir()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    server = kafka_bootstrap.split(",")[0]
    (Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_spark_notify.py").write_text(
        textwrap.dedent(
            DAG_FILE.format(
                out=str(out), topology=str(tmp_path / "topology.yaml"), conf=SPARK_CONF, server=server
            )
        )
    )
    seed_metadata_db(env, cwd=REPO)
    _airflow(env, "dags", "reserialize")

    run = run_airflow(env, "dags", "test", "akr_spark_notify", timeout=600)
    output = run.stdout + run.stderr
    (out / "airflow-output.txt").write_text(output)
    assert _states(env, "akr_spark_notify") == {"reprocess_main": "success"}, output[-5000:]

    tier1 = topology.tier(1).topic
    to_dlt = modes["fatal"] + modes["bad-json"]
    retried = modes["transient:1"] + modes["transient:2"] + modes["permanent"]
    [note] = [json.loads(line) for line in (out / "notified.jsonl").read_text().splitlines()]
    assert note["engine"] == "spark"
    assert note["stopped"] is None
    assert note["totals"]["dlt_topics"] == {topology.dlt_topic: to_dlt}
    assert note["totals"]["routed"] == {tier1: retried, topology.dlt_topic: to_dlt}
    assert len(note["dead_letters"]) == to_dlt
    group = topology.consumer_group(topology.tier(0))
    extra = {"source_topic": topology.topic, "source_tier": 0, "group": group}
    assert sorted(_asset_events(tmp_path / "airflow" / "airflow.db", "akr_spark_notify")) == sorted(
        [
            ("reprocess_main", f"kafka://{server}/{tier1}", {"records": retried, **extra}),
            ("reprocess_main", f"kafka://{server}/{topology.dlt_topic}", {"records": to_dlt, **extra}),
        ]
    )
