"""The transport check reads the ``spark-defaults.conf`` that spark-submit will read: the one of the
environment ``run_spark_submit`` gives it (``env``), not the calling process's."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.sandbox.processes import free_port
from airflow_kafka_retry.spark.master import SparkMasterUnreachableError
from airflow_kafka_retry.spark.submit import run_spark_submit
from airflow_kafka_retry.spark.transport import UnencryptedSecretsError

PROTECTED = "spark.authenticate true\nspark.network.crypto.enabled true\n"


def _submit(tmp_path, env):
    (tmp_path / "topology.yaml").write_text("topic: t\ngroup_id: g\nattempts: 2\n")
    run_spark_submit(
        topology_path=tmp_path / "topology.yaml",
        tier=0,
        options=DrainOptions(handler="tests.support.ledger_handler:indexed"),
        kafka_config={"bootstrap.servers": "127.0.0.1:9", "sasl.password": "pw"},
        master=f"spark://127.0.0.1:{free_port()}",  # nobody answers: nothing starts either way
        env=env,
        timeout_s=30,
    )


@pytest.fixture
def conf_dirs(tmp_path):
    protected, empty = tmp_path / "protected", tmp_path / "empty"
    protected.mkdir()
    empty.mkdir()
    (protected / "spark-defaults.conf").write_text(PROTECTED)
    return protected, empty


def test_protection_set_in_spark_submits_environment_lets_the_secrets_go(tmp_path, conf_dirs, monkeypatch):
    protected, empty = conf_dirs
    monkeypatch.setenv("SPARK_CONF_DIR", str(empty))
    with pytest.raises(SparkMasterUnreachableError):  # past the transport check, stopped at the master
        _submit(tmp_path, {"SPARK_CONF_DIR": str(protected)})


def test_protection_only_in_the_callers_environment_does_not(tmp_path, conf_dirs, monkeypatch):
    protected, empty = conf_dirs
    monkeypatch.setenv("SPARK_CONF_DIR", str(protected))
    with pytest.raises(UnencryptedSecretsError, match="spark.authenticate, spark.network.crypto.enabled"):
        _submit(tmp_path, {"SPARK_CONF_DIR": str(empty)})
