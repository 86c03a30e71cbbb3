"""
``IsolatedSparkSubmitHook``: ``spark-submit`` without the Airflow worker's secrets.

It starts without them in its environment.
"""

from __future__ import annotations

import os
import subprocess
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from airflow.providers.apache.spark.hooks import spark_submit as provider_hook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_kafka_retry.spark.masking import OutputMasker, mask_text
from airflow_kafka_retry.spark.staging import delete_own_folder, leave_own_folder
from airflow_kafka_retry.spark.submit import spark_app_environment


class _StrippedSubprocess:
    """
    The ``subprocess`` module as the base class's status/kill methods see it: children get no Airflow secrets.

    ``Popen`` and ``run`` start their child with :func:`spark_app_environment` of the environment
    they were given (the worker's own when none was): no ``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``,
    ``AIRFLOW__*``. Everything else is the real module.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def _stripped(kwargs: dict[str, Any]) -> dict[str, Any]:
        env = kwargs.get("env")
        return {**kwargs, "env": spark_app_environment(os.environ if env is None else env)}

    def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen[Any]:  # subprocess's name
        return subprocess.Popen(*args, **self._stripped(kwargs))

    def run(self, *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        # the caller's own ``check`` (the provider passes check=False) wins: a second one would be a TypeError
        kwargs = {"check": False, **self._stripped(kwargs)}
        return subprocess.run(*args, **kwargs)  # noqa: PLW1510 - check is in kwargs, the caller's or False


#: The base class's methods that start processes besides ``spark-submit`` itself: ``spark-submit
#: --status`` (or curl) while tracking a standalone-cluster driver, ``spark-submit --kill`` (or curl)
#: and ``yarn application -kill`` on kill, and the user's post-submit commands.
STATUS_AND_KILL_METHODS = ("_start_driver_status_tracking", "on_kill", "_run_post_submit_commands")


def _with_stripped_subprocess(function: Callable[..., Any]) -> Callable[..., Any]:
    """
    ``function`` (a method of the provider's hook) run against :class:`_StrippedSubprocess` as ``subprocess``.

    The copy shares the provider module's code and, but for ``subprocess``, its globals, so it
    follows the installed provider version; only this hook's instances use it.
    """
    namespace = {**vars(provider_hook), "subprocess": _StrippedSubprocess()}
    copy = types.FunctionType(
        function.__code__, namespace, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__doc__ = function.__doc__
    copy.__qualname__ = function.__qualname__
    return copy


class IsolatedSparkSubmitHook(SparkSubmitHook):
    """
    A ``SparkSubmitHook`` whose processes do not inherit Airflow connections, variables or config.

    ``SparkSubmitHook`` starts ``spark-submit`` with the worker's whole environment, so every
    ``AIRFLOW_CONN_*`` (passwords included), ``AIRFLOW_VAR_*`` and ``AIRFLOW__*`` setting would reach
    the Spark driver, its executors and the user's handler code. This hook starts it with the
    environment less those (see :func:`~airflow_kafka_retry.spark.submit.spark_app_environment`),
    plus the operator's ``env_vars``, which still pass through as the base class passes them.

    The other processes the base class starts -- ``spark-submit --status`` and ``--kill`` (or their
    REST ``curl`` forms) for a standalone-cluster driver, ``yarn application -kill``, post-submit
    commands -- get the same stripped environment (see :data:`STATUS_AND_KILL_METHODS`).

    The command line it logs masks ``--conf`` values whose key looks secret (``password``, ``secret``,
    ``token``, ``key``, ``sasl``, ``ssl``) besides what the base class masks; every line of
    ``spark-submit``'s output passes through the CLI path's
    :class:`~airflow_kafka_retry.spark.masking.OutputMasker` (the same rules, every secret ``--conf``
    value and every credential of :attr:`kafka_config` wherever it shows up, every ``env_vars`` value
    as a word of its own) before the base class reads or logs it.

    In Kubernetes cluster mode it deletes the folder the operator uploaded the run's own files to,
    once the application has ended (:meth:`delete_uploads`). Nothing read from ``spark-submit``'s
    output is ever deleted: in client mode the driver's and the handler's own output is in it.
    """

    #: the run's Kafka settings (the operator sets them): their credentials are masked in the output
    kafka_config: Mapping[str, Any] | None = None
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

    def delete_uploads(self, folder: str) -> bool:
        """
        Delete ``folder``, the operator's own upload folder, once the application has ended.

        When ``spark-submit`` returned before the application ended
        (``spark.kubernetes.submission.waitAppCompletion=false`` without ``track_driver_via_k8s_api``)
        the driver may not have fetched the files yet: the folder is left, with a warning naming it.
        """
        waited = (
            str(self._conf.get("spark.kubernetes.submission.waitAppCompletion", "true")).lower() != "false"
        )
        if not waited and not self._should_track_driver_via_k8s_api():
            leave_own_folder(folder, "spark-submit did not wait for the application to end")
            return False
        return delete_own_folder(folder)

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        mask = self._output_masker()
        super()._process_spark_submit_log(mask(str(line)) for line in itr)

    def _output_masker(self) -> OutputMasker:
        """
        The CLI path's masker: secret ``--conf`` values, every ``env_vars`` value, the Kafka credentials.

        Spark sets ``env_vars`` as ``spark.*Env.*`` properties on YARN and Kubernetes, and may print them.
        """
        env = {f"spark.executorEnv.{k}": v for k, v in (self._env_vars or {}).items()}
        return OutputMasker.for_submission({**(self._conf or {}), **env}, self.kafka_config)

    def _mask_cmd(self, connection_cmd: str | list[str]) -> str:
        return mask_text(super()._mask_cmd(connection_cmd))

    _start_driver_status_tracking = _with_stripped_subprocess(SparkSubmitHook._start_driver_status_tracking)
    _run_post_submit_commands = _with_stripped_subprocess(SparkSubmitHook._run_post_submit_commands)
    _base_on_kill = _with_stripped_subprocess(SparkSubmitHook.on_kill)

    def on_kill(self) -> None:
        self._env = self._own_env  # the YARN kill command of the base class runs with it
        self._base_on_kill()
