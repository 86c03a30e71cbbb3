"""Kafka secrets and a Spark master that is not ``local``: the refusal and the protected run, through
spark-submit.

``local-cluster[N,C,M]`` is Spark's own multi-process master: a standalone master and worker inside
the driver's JVM and each executor in a JVM of its own, talking to the driver over Spark's RPC
exactly as on a real cluster. It starts here, so the non-local code paths run for real:

* the CLI refuses before anything starts (no Spark at all: fast);
* the driver refuses on the configuration Spark really runs with, when the submitting side
  believed the run local;
* with ``spark.authenticate`` and ``spark.network.crypto.enabled`` on, the secrets reach executors in
  their own JVM and the run completes;
* the driver will not write its summary through a symlink planted at the result path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.spark.result import SparkAppError
from airflow_kafka_retry.spark.submit import (
    local_spark_environment,
    prepare_submission,
    run_spark_submit,
    spark_app_environment,
    spark_submit_command,
)

from tests.integration.test_spark_app import (
    PARTITIONS,
    SPARK_CONF,
    SPARK_ENV,
    SparkEnvWatcher,
    describe_process,
)
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).parents[2]
SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"
#: one worker with one core; its executor (512 MiB) in a JVM of its own
LOCAL_CLUSTER = "local-cluster[1,1,768]"
CLUSTER_CONF = {**SPARK_CONF, "spark.executor.memory": "512m"}
OPTIONS = DrainOptions(
    handler=f"{ledger.HANDLER_MODULE}:indexed",
    value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
    batch_size=20,
    chunk_size=100,
)


def _kafka(bootstrap: str) -> dict[str, str]:
    # librdkafka accepts sasl.* settings on a PLAINTEXT connection, so the embedded broker serves them
    return {"bootstrap.servers": bootstrap, "sasl.username": "svc", "sasl.password": SECRET}


def _submit_env() -> dict[str, str]:
    return {**spark_app_environment(os.environ), **local_spark_environment(), **SPARK_ENV}


def test_cli_refuses_to_send_secrets_to_a_cluster_master_without_rpc_protection(tmp_path):
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(ledger.make_topology("cli-refuse"), topology_file)
    kafka_config = tmp_path / "kafka.json"
    kafka_config.write_text(json.dumps(_kafka("127.0.0.1:1")))
    cmd = [
        sys.executable,
        "-m",
        "airflow_kafka_retry.cli",
        "-v",
        "drain",
        "--engine",
        "spark",
        "--master",
        LOCAL_CLUSTER,
        "--conf",
        "spark.authenticate=true",
        "--topology",
        str(topology_file),
        "--tier",
        "0",
        "--handler",
        f"{ledger.HANDLER_MODULE}:indexed",
        "--kafka-config",
        str(kafka_config),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_CONF_DIR": str(tmp_path)}  # no spark-defaults.conf

    refused = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)

    assert refused.returncode == 2, refused.stderr[-2000:]
    assert (
        "airflow-kafka-retry: error: the Kafka configuration holds secrets (sasl.password) and every Spark "
        "task "
        f"carries it to the executors of master '{LOCAL_CLUSTER}' over Spark's RPC, which is not protected: "
        "spark.network.crypto.enabled is not set (looked in --conf)"
    ) in refused.stderr
    assert "spark-submit command" not in refused.stderr, "spark-submit was started"
    assert SECRET not in refused.stdout + refused.stderr


@pytest.mark.slow
def test_the_driver_refuses_when_spark_runs_it_with_a_cluster_master_and_unprotected_rpc(
    kafka_bootstrap, tmp_path
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("drv-refuse"), tmp_path / "topology.yaml")
    ledger.produce_inputs(kafka_bootstrap, topology, 20, PARTITIONS)
    # the submitting side was told the run is local, so its own check passes; Spark runs it on local-cluster
    with prepare_submission(
        topology_path=tmp_path / "topology.yaml",
        tier=0,
        options=OPTIONS,
        kafka_config=_kafka(kafka_bootstrap),
        master="local[2]",
    ) as submission:
        cmd = spark_submit_command(submission, master=LOCAL_CLUSTER, conf=CLUSTER_CONF)
        done = subprocess.run(
            cmd, check=False, env=_submit_env(), capture_output=True, text=True, timeout=300
        )
        with pytest.raises(SparkAppError) as err:
            submission.read_summary()
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert str(err.value).startswith(
        "the Kafka configuration holds secrets (sasl.password) and every Spark task "
        f"carries it to the executors of master '{LOCAL_CLUSTER}' over Spark's RPC, "
        "which is not protected: spark.authenticate, spark.network.crypto.enabled are "
        "not set in the Spark configuration the driver runs with."
    )
    assert "refusing to start" in output
    assert "Running Spark version" in output, "the check must run on the driver's live Spark configuration"
    assert "Starting task" not in output, "a task (and with it the Kafka password) went to an executor"
    assert all(
        offset < 0
        for offset in ledger.committed(
            kafka_bootstrap, topology.group_id, topology.topic, PARTITIONS
        ).values()
    )
    assert ledger.processed_ids(ledger_file) == {}
    assert SECRET not in output


@pytest.mark.slow
def test_secrets_reach_executors_in_their_own_jvm_over_authenticated_encrypted_rpc(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("protected"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 40, PARTITIONS)
    protected = {
        **CLUSTER_CONF,
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        # a standalone master (local-cluster is one) needs the shared secret given; YARN and
        # Kubernetes generate one per application
        "spark.authenticate.secret": uuid.uuid4().hex,
    }
    output: list[str] = []
    watcher = SparkEnvWatcher(SECRET, scope=str(tmp_path))
    watcher.start()
    try:
        summary = run_spark_submit(
            topology_path=tmp_path / "topology.yaml",
            tier=0,
            options=OPTIONS,
            kafka_config=_kafka(kafka_bootstrap),
            master=LOCAL_CLUSTER,
            conf=protected,
            env=SPARK_ENV,
            on_output=output.append,
        )
    finally:
        watcher.stop()
    assert summary.ok, "\n".join(output[-60:])
    assert summary.engine == "spark", "\n".join(output[-60:])
    assert summary.to_dict()["totals"]["drained"] == 40
    fates = [mode for mode, _, _ in inputs.records.values()]
    assert len(ledger.processed_ids(ledger_file)) == fates.count("ok")
    # the tasks ran in an executor JVM of their own, reached over authenticated RPC
    assert watcher.executor_jvms, "no executor JVM of this run was seen: the run proves nothing about RPC"
    assert [line for line in output if "SecurityManager: authentication enabled" in line]
    assert not watcher.cmdline_hits, sorted({describe_process(c) for c in watcher.spark_env_hits.values()})
    assert not watcher.spark_env_hits, sorted({describe_process(c) for c in watcher.spark_env_hits.values()})
    assert not [line for line in output if SECRET in line]


def test_the_driver_will_not_write_its_summary_through_a_planted_symlink(tmp_path):
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(ledger.make_topology("symlink"), topology_file)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    shared = tmp_path / "shared"
    shared.mkdir()
    result = shared / "summary.json"
    result.symlink_to(victim)  # planted by another local user before the run
    with prepare_submission(
        topology_path=topology_file,
        tier=0,
        options=OPTIONS,
        master="local[2]",
        kafka_config=_kafka("127.0.0.1:1"),
        result_path=str(result),
    ) as submission:
        cmd = spark_submit_command(submission, master="local[2]", conf=SPARK_CONF)
        done = subprocess.run(
            cmd, check=False, env=_submit_env(), capture_output=True, text=True, timeout=300
        )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert f"refusing to start: the result path {result} already holds a symlink" in output
    assert victim.read_text() == "precious"
    assert result.is_symlink()
    assert "Running Spark version" not in output, "the driver went on after the check"
