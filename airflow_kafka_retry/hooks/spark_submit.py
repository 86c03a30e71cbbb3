"""``IsolatedSparkSubmitHook``: ``spark-submit`` started without the Airflow worker's secrets in its environment."""

from __future__ import annotations

import os
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_kafka_retry.spark.submit import spark_app_environment


class IsolatedSparkSubmitHook(SparkSubmitHook):
    """A ``SparkSubmitHook`` whose ``spark-submit`` does not inherit Airflow connections, variables or config.

    ``SparkSubmitHook`` starts ``spark-submit`` with the worker's whole environment, so every
    ``AIRFLOW_CONN_*`` (passwords included), ``AIRFLOW_VAR_*`` and ``AIRFLOW__*`` setting would reach
    the Spark driver, its executors and the user's handler code. This hook starts it with the
    environment less those (see :func:`~airflow_kafka_retry.spark.submit.spark_app_environment`),
    plus the operator's ``env_vars``, which still pass through as the base class passes them.
    """

    _submit_env: dict[str, Any] | None = None  # the environment of the spark-submit being started
    _own_env: dict[str, Any] | None = None  # what the base class decided for ``_env`` while building it

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        # The base class builds the command -- which decides the extra environment, ``_env`` -- and
        # then starts spark-submit with os.environ + _env whenever _env is set. Give it an ``env`` of
        # ours instead, filled in once the command is built (see _build_spark_submit_command).
        self._submit_env = {}
        try:
            return super().submit(application, env=self._submit_env, **kwargs)
        finally:
            self._submit_env = None
            self._env = self._own_env

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command = super()._build_spark_submit_command(application)
        if self._submit_env is not None:
            self._own_env = self._env
            self._submit_env.update({**spark_app_environment(os.environ), **(self._env or {})})
            self._env = None  # the base class would start from os.environ again; ours holds these already
        return command

    def on_kill(self) -> None:
        self._env = self._own_env  # the YARN kill command of the base class runs with it
        super().on_kill()
