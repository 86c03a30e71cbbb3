"""What spark-submit prints is masked on the operator path too (issue 29, item 5): the real spark-submit.

``SparkSubmitHook`` logs spark-submit's output line by line; with ``verbose=True`` Spark prints every
property it was given as ``(key,value)``, and Spark's own redaction does not cover a
``spark.executorEnv.DB_PASS``. The provider's hook must leak it (the check can fail); ours must not.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_kafka_retry.hooks.spark_submit import IsolatedSparkSubmitHook
from airflow_kafka_retry.spark.submit import local_spark_environment

from tests.integration.test_spark_app import SPARK_CONF, SPARK_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECRET = f"pw-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(
    ("hook_class", "leaks"),
    [
        pytest.param(SparkSubmitHook, True, id="provider-hook-leaks"),
        pytest.param(IsolatedSparkSubmitHook, False, id="isolated-hook"),
    ],
)
def test_verbose_spark_submit_output_is_masked(hook_class, leaks, tmp_path, monkeypatch, caplog, capfd):
    for key, value in {**local_spark_environment(), **SPARK_ENV}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL_TEST", json.dumps({"conn_type": "spark", "host": "local"}))
    app = tmp_path / "app.py"
    app.write_text("print('the app ran')\n")
    hook = hook_class(
        conn_id="spark_local_test",
        conf={**SPARK_CONF, "spark.executorEnv.DB_PASS": SECRET},
        verbose=True,
        name="akr-mask-test",
    )
    with caplog.at_level(logging.INFO):
        hook.submit(str(app))
    out, err = capfd.readouterr()  # the hook logs through Airflow's logging (structlog), not caplog alone
    logged = "\n".join([*(r.getMessage() for r in caplog.records), out, err])
    assert "spark.executorEnv.DB_PASS" in logged, "spark-submit's verbose output was not logged"
    assert (SECRET in logged) == leaks, [line for line in logged.splitlines() if "DB_PASS" in line]
