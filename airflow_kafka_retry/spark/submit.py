"""
Everything a ``spark-submit`` of the tier app needs, and a plain runner used by the CLI.

:func:`prepare_submission` makes a private work folder (``0700``) holding

* ``deps.zip`` for ``--py-files``: this package and the handler's/deserializers' top-level
  packages (see :mod:`~airflow_kafka_retry.spark.pyfiles`);
* ``kafka-config.json`` (``0600``): the librdkafka configuration, credentials included; only its
  PATH goes into the application arguments (see :mod:`~airflow_kafka_retry.spark.credentials`);
* by default the result document the driver writes (see :mod:`~airflow_kafka_retry.spark.result`).

Before writing anything it refuses a run whose Kafka secrets would reach executors over an
unprotected network (see :mod:`~airflow_kafka_retry.spark.transport`), and in cluster deploy mode
it adds the settings that delete the shipped credentials file (see
:mod:`~airflow_kafka_retry.spark.staging`).

Use it as a context manager: the folder, and with it the credentials file, is deleted when the
block ends, whether the run succeeded or not. :class:`SparkReprocessTierOperator
<airflow_kafka_retry.operators.spark_reprocess.SparkReprocessTierOperator>` hands the submission to
Airflow's ``SparkSubmitOperator``; :func:`run_spark_submit` runs ``spark-submit`` itself.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.spark.credentials import (
    check_shippable,
    remove_credentials_file,
    write_credentials_file,
)
from airflow_kafka_retry.spark.masking import OutputMasker, mask_command
from airflow_kafka_retry.spark.master import check_master_answers
from airflow_kafka_retry.spark.pyfiles import build_for_options
from airflow_kafka_retry.spark.result import ResultMissingError, read_result, remove_result
from airflow_kafka_retry.spark.running import (
    deadline,
    find_spark_submit,
    spark_home,
    stream,
    submit_timeout_s,
)
from airflow_kafka_retry.spark.staging import cluster_mode_conf
from airflow_kafka_retry.spark.transport import check_secrets_transport, effective_spark_conf

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.drain.summary import RunSummary

log = logging.getLogger(__name__)

#: The entry point shipped inside the package: what an installed provider submits by default.
APPLICATION = str(Path(__file__).with_name("entrypoint.py"))
PY_FILES_NAME = "deps.zip"
RESULT_NAME = "summary.json"
_TAIL_LINES = 60


class SparkSubmitError(RuntimeError):
    """``spark-submit`` ended without a result document; the message holds the tail of its output."""


@dataclass
class Submission:
    """
    One prepared run of the tier app; delete its work folder with :meth:`cleanup` (or ``with``).

    :param application: the ``.py`` file to submit.
    :param py_files: the ``--py-files`` zip.
    :param application_args: the app's arguments; they hold paths only, never credentials.
    :param kafka_config_file: the ``0600`` credentials file (inside ``workdir``).
    :param result_path: where the driver writes the run summary (path or fsspec URL).
    :param workdir: the private folder holding the zip, the credentials and the default result.
    :param shipped: the top-level packages/modules in the zip.
    :param spark_conf: Spark properties the run adds to the caller's (cluster-mode clean-up settings).
    """

    application: str
    py_files: str
    application_args: list[str]
    kafka_config_file: str
    result_path: str
    workdir: str
    shipped: list[str] = field(default_factory=list)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def cleanup(self) -> None:
        """Delete the credentials file, then the whole work folder."""
        remove_credentials_file(self.kafka_config_file)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def read_summary(self) -> RunSummary:
        """The run summary the driver wrote (see :func:`~airflow_kafka_retry.spark.result.read_result`)."""
        return read_result(self.result_path)

    def __enter__(self) -> Submission:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


def _local_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text if "://" in text else os.path.abspath(text)


def app_arguments(
    *,
    topology_path: str | os.PathLike[str],
    tier: int | str,
    options: DrainOptions,
    kafka_config_file: str,
    result_path: str,
    cutoff_ms: int | None = None,
    partitions: Iterable[int] | None = None,
    allow_unencrypted_secrets: bool = False,
) -> list[str]:
    """
    The tier app's command-line arguments: paths and options only.

    See :mod:`~airflow_kafka_retry.spark.app`.
    """
    args = [
        "--topology",
        _local_path(topology_path),
        "--tier",
        str(tier),
        "--options-json",
        json.dumps(options.to_dict(), separators=(",", ":")),
        "--kafka-config-file",
        kafka_config_file,
        "--result",
        _local_path(result_path),
    ]
    if cutoff_ms is not None:
        args += ["--cutoff-ms", str(int(cutoff_ms))]
    if partitions is not None:
        args += ["--partitions", ",".join(str(int(p)) for p in partitions)]
    if allow_unencrypted_secrets:
        args.append("--allow-unencrypted-secrets")
    return args


def prepare_submission(
    *,
    topology_path: str | os.PathLike[str],
    tier: int | str,
    options: DrainOptions,
    kafka_config: Mapping[str, Any],
    master: str,
    deploy_mode: str | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    properties_file: str | None = None,
    allow_unencrypted_secrets: bool = False,
    result_path: str | None = None,
    cutoff_ms: int | None = None,
    partitions: Iterable[int] | None = None,
    application: str | None = None,
    tmp_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Submission:
    """
    Check that the Kafka secrets may travel, then build the submission.

    The py-files zip, the credentials file and the arguments.

    :param topology_path: the topology YAML (local path or fsspec URL readable by the driver).
    :param tier: tier index, topic name or ``dlt``.
    :param options: handler and run options.
    :param kafka_config: librdkafka configuration; written to a ``0600`` file, never into arguments.
    :param master: the Spark master the run is submitted to.
    :param deploy_mode: ``cluster`` or ``client`` (default: client).
    :param spark_conf: the run's Spark properties (``--conf``); with ``properties_file`` and
        ``spark-defaults.conf`` they decide whether Spark's RPC is protected.
    :param properties_file: the ``--properties-file`` of the run, if any.
    :param allow_unencrypted_secrets: let secrets reach executors over unprotected Spark RPC.
    :param result_path: where the driver writes the summary (default: a new file in the private work folder).
    :param cutoff_ms: due-time cutoff (default: when the driver starts).
    :param partitions: only these partitions (default: all).
    :param application: the app to submit (default: the entry point inside the package).
    :param tmp_dir: parent of the private work folder (default: the system temp folder).
    :param environ: spark-submit's environment, where its ``SPARK_CONF_DIR`` is found (default: this one).
    :raises airflow_kafka_retry.spark.transport.UnencryptedSecretsError: naming the missing Spark settings.
    :raises airflow_kafka_retry.spark.master.SparkMasterUnreachableError: a ``spark://`` master that does
        not answer, named.
    """
    effective, where = effective_spark_conf(spark_conf, properties_file, environ)
    check_secrets_transport(
        check_shippable(kafka_config),
        master=master,
        spark_conf=effective,
        allow_unencrypted_secrets=allow_unencrypted_secrets,
        where=where,
    )
    extra_conf = cluster_mode_conf(master, deploy_mode, effective)
    check_master_answers(master)  # a spark:// master that does not answer: an error naming it, at once
    workdir = tempfile.mkdtemp(prefix="akr-spark-", dir=tmp_dir)  # 0700
    try:
        py_files = os.path.join(workdir, PY_FILES_NAME)
        shipped = build_for_options(py_files, options)
        credentials = write_credentials_file(kafka_config, workdir)
        result = result_path or os.path.join(workdir, RESULT_NAME)
        args = app_arguments(
            topology_path=topology_path,
            tier=tier,
            options=options,
            kafka_config_file=credentials,
            result_path=result,
            cutoff_ms=cutoff_ms,
            partitions=partitions,
            allow_unencrypted_secrets=allow_unencrypted_secrets,
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Submission(
        application=application or APPLICATION,
        py_files=py_files,
        application_args=args,
        kafka_config_file=credentials,
        result_path=result,
        workdir=workdir,
        shipped=shipped,
        spark_conf=extra_conf,
    )


# ----------------------------------------------------------------------------- spark-submit
#: Never handed to spark-submit: Airflow connections and variables given as environment variables, and
#: Airflow configuration (which may hold the metadata DB URL, the Fernet key, secrets-backend settings).
#: The Spark application needs none of it; its Kafka configuration travels in the credentials file.
WITHHELD_ENV_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__")


def spark_app_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The base environment of ``spark-submit``: ``environ`` less :data:`WITHHELD_ENV_PREFIXES`."""
    return {k: v for k, v in environ.items() if not k.startswith(WITHHELD_ENV_PREFIXES)}


def local_spark_environment(spark_submit: str | None = None) -> dict[str, str]:
    """
    Environment for a local/client-mode submit from this Python: the same interpreter drives and executes.

    Sets ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` to this interpreter and ``SPARK_HOME`` to the
    bundled Spark, unless already set, and puts ``spark-submit``'s folder on ``PATH``.
    Holds no credentials.
    """
    pythons = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    env = {key: sys.executable for key in pythons if not os.environ.get(key)}
    home = spark_home()
    if home and not os.environ.get("SPARK_HOME"):
        env["SPARK_HOME"] = home
    return {**env, **spark_submit_on_path(spark_submit)}


def spark_submit_on_path(spark_submit: str | None = None) -> dict[str, str]:
    """
    ``PATH`` with ``spark_submit``'s folder first (default :func:`find_spark_submit`), or {} if it is on it.

    The Spark hook runs a bare ``spark-submit``: a worker without it on ``PATH`` then runs pyspark's own.
    """
    folder = os.path.dirname(spark_submit or find_spark_submit())
    path = os.environ.get("PATH", "")
    if not folder or folder in path.split(os.pathsep):
        return {}
    return {"PATH": os.pathsep.join(p for p in (folder, path) if p)}


def spark_submit_command(
    submission: Submission,
    *,
    master: str,
    conf: Mapping[str, Any] | None = None,
    spark_submit: str | None = None,
    name: str | None = None,
) -> list[str]:
    """The ``spark-submit`` command line (paths and options only); ``spark.submit.pyFiles`` joins ours."""
    cmd = [spark_submit or find_spark_submit(), "--master", master]
    if name:
        cmd += ["--name", name]
    merged = {**submission.spark_conf, **(conf or {})}
    py_files = ",".join(p for p in (merged.pop("spark.submit.pyFiles", ""), submission.py_files) if p)
    for key, value in merged.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += ["--py-files", py_files, submission.application, *submission.application_args]
    return cmd


def run_spark_submit(
    *,
    topology_path: str | os.PathLike[str],
    tier: int | str,
    options: DrainOptions,
    kafka_config: Mapping[str, Any],
    master: str = "local[2]",
    cutoff_ms: int | None = None,
    partitions: Sequence[int] | None = None,
    result_path: str | None = None,
    conf: Mapping[str, Any] | None = None,
    spark_submit: str | None = None,
    env: Mapping[str, str] | None = None,
    application: str | None = None,
    allow_unencrypted_secrets: bool = False,
    on_output: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
) -> RunSummary:
    """
    Submit the tier app with ``spark-submit`` (a plain subprocess), wait, and return its run summary.

    The summary is returned even when partitions failed (check ``summary.ok``); the credentials
    file is deleted before this returns.

    :param master: Spark master (``local[2]``, ``spark://host:7077``, ``yarn``...).
    :param conf: Spark properties (``--conf``); never put credentials here (values whose key looks
        secret are masked in the logged command line, but ``ps`` shows them).
    :param env: extra environment for ``spark-submit`` (on top of this process's environment less
        :data:`WITHHELD_ENV_PREFIXES`, and :func:`local_spark_environment`).
    :param allow_unencrypted_secrets: see :func:`prepare_submission`.
    :param on_output: called with every line ``spark-submit`` prints (stdout and stderr), masked as it is
        logged: secret-looking ``KEY=VALUE`` pairs and every secret value of ``conf`` and ``kafka_config``
        (see :class:`~airflow_kafka_retry.spark.masking.OutputMasker`).
    :param timeout_s: how long to wait for ``spark-submit``; then its process group (the JVM with it) is
        stopped and a :class:`SparkSubmitError` names what it waited for. Default:
        :func:`~airflow_kafka_retry.spark.running.submit_timeout_s` (the run's ``deadline_ms`` plus a
        grace period, or a fixed bound for a run without one).
    :raises airflow_kafka_retry.spark.transport.UnencryptedSecretsError: secrets would cross unprotected
        Spark RPC (see :func:`prepare_submission`); a ValueError, raised before anything starts.
    :raises airflow_kafka_retry.spark.result.SparkAppError: the app refused to start (bad input); a
        ValueError.
    :raises SparkSubmitError: ``spark-submit`` left no result (it crashed or never started the app), or
        did not end within ``timeout_s``.
    """
    binary = spark_submit or find_spark_submit()
    timeout = submit_timeout_s(options) if timeout_s is None else timeout_s
    full_env = {**spark_app_environment(os.environ), **local_spark_environment(binary), **(env or {})}
    with prepare_submission(
        topology_path=topology_path,
        tier=tier,
        options=options,
        kafka_config=kafka_config,
        master=master,
        spark_conf=conf,
        allow_unencrypted_secrets=allow_unencrypted_secrets,
        result_path=result_path,
        cutoff_ms=cutoff_ms,
        partitions=partitions,
        application=application,
        environ=full_env,  # the spark-defaults.conf that spark-submit reads decides, not this process's
    ) as submission:
        remove_result(submission.result_path)
        cmd = spark_submit_command(submission, master=master, conf=conf, spark_submit=binary)
        log.info("spark-submit command: %s", mask_command(cmd))
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        mask = OutputMasker.for_submission({**submission.spark_conf, **(conf or {})}, kafka_config)
        with (
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=full_env,
                bufsize=1,
                start_new_session=True,  # a group of its own: stopped whole at the deadline
            ) as process,
            deadline(process, timeout) as expired,
        ):
            stream(process, on_output, tail, mask)
            returncode = process.wait()
        if expired.is_set():
            output = "\n".join(tail)
            raise SparkSubmitError(
                f"spark-submit (pid {process.pid}) did not end within {timeout:g} s, waiting for tier {tier} "
                f"of {topology_path} to write its result to {submission.result_path}; it and its process "
                f"group were stopped; last output:\n{output}"
            )
        log.info("spark-submit exited with %s", returncode)
        try:
            return submission.read_summary()
        except ResultMissingError:
            output = "\n".join(tail)
            raise SparkSubmitError(
                f"spark-submit exited with {returncode} and the app wrote no result to "
                f"{submission.result_path}; last output:\n{output}"
            ) from None
