"""``SparkReprocessTierOperator``: reprocess one retry tier with Spark, one task per Kafka partition."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

from airflow_kafka_retry.engine.options import DrainOptions
from airflow_kafka_retry.engine.summary import RunSummary
from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
from airflow_kafka_retry.hooks.spark_submit import IsolatedSparkSubmitHook
from airflow_kafka_retry.policy.resolver import wall_clock_ms
from airflow_kafka_retry.spark.result import ResultMissingError, SparkAppError, read_result, remove_result
from airflow_kafka_retry.spark.submit import Submission, local_spark_environment, prepare_submission

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: Options named by their own operator parameters, not through ``options``.
_OWN_PARAMETERS = ("handler", "value_deserializer", "key_deserializer")


def to_epoch_ms(value: Any) -> int:
    """Epoch milliseconds from an int/float (ms), a datetime (naive = UTC) or an ISO-8601/digit string."""
    if isinstance(value, bool):
        raise ValueError(f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"cutoff {value!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(value.timestamp() * 1000)
    raise ValueError(f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}")


def failure_message(summary: RunSummary) -> str:
    """Which partitions failed and why, for the task's exception."""
    failed = sorted(summary.failed_partitions, key=lambda p: p.partition)
    lines = [f"Spark reprocessing of {summary.topic} (tier {summary.tier}, group {summary.group}) failed on "
             f"{len(failed)} of {len(summary.partitions)} partition(s); other partitions committed their "
             "progress and a rerun resumes each failed one from its committed offset:"]
    lines += [f"  partition {p.partition}: {p.error or 'failed'} (committed up to {p.committed_offset})"
              for p in failed]
    return "\n".join(lines)


class SparkReprocessTierOperator(SparkSubmitOperator):
    """Reprocess the due records of one retry tier (or a DLT) with Spark: one Spark task per Kafka partition.

    Each task calls the handler on its partition's due records, routes failures to the next tier or
    the DLT and commits offsets in Kafka transactions (see :mod:`airflow_kafka_retry.spark.app`).
    The application, its ``--py-files`` zip (this package plus the handler's package) and its
    arguments are built here; every other ``SparkSubmitOperator`` argument (``conf``,
    ``executor_memory``, ``env_vars``...) is passed through.

    The Kafka configuration comes from the ``kafka_conn_id`` connection. It may hold credentials, so
    it is written to a ``0600`` file whose path (never its content) is given to the application, and
    the file is deleted when the run ends. It never appears in the command line, the task log, XCom
    or Spark properties. ``spark-submit`` is started without the worker's ``AIRFLOW_CONN_*``,
    ``AIRFLOW_VAR_*`` and ``AIRFLOW__*`` environment variables, so neither this connection nor any
    other reaches the Spark application's environment; pass what the handler needs in ``env_vars``.

    The run summary (counts, offsets, dead-letter coordinates; never payloads) is the task's return
    value (XCom). If any partition failed, the task fails with a message naming each failed
    partition and its error; the summary is still pushed to XCom under the key ``summary``.

    With a ``local`` Spark master the application runs with this worker's Python and bundled Spark.
    With a cluster master, executors need ``confluent-kafka`` and ``pyyaml`` installed, and
    ``result_path`` must be a location both the driver and this worker reach (e.g. ``s3://...``)
    when the driver does not run here (cluster deploy mode).

    :param topology: path (or fsspec URL) of the topology YAML, readable by the Spark driver. (templated)
    :param tier: the tier to reprocess: its index (0 = main topic), its topic name, or ``dlt``. (templated)
    :param handler: the handler, ``package.module:function``. (templated)
    :param value_deserializer: ``package.module:function`` decoding record values. (templated)
    :param key_deserializer: ``package.module:function`` decoding record keys. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param conn_id: the Spark connection (any master: ``local[2]``, ``spark://``, ``yarn``, ``k8s://``).
    :param result_path: where the driver writes the run summary, a path or fsspec URL, deleted once
        read; default: a new file in the run's private work folder (see
        :mod:`airflow_kafka_retry.spark.result`). (templated)
    :param options: further :class:`~airflow_kafka_retry.engine.options.DrainOptions` fields
        (``batch_size``, ``chunk_size``, ``max_records``, ``transactional``...). (templated)
    :param cutoff: records due after this stay for a later run: epoch milliseconds, a datetime or an
        ISO-8601 string; default: the run's data interval end, else its logical date, else now. (templated)
    :param partitions: reprocess only these partitions (default: all).
    :param application: the ``.py`` application to submit; default: the entry point inside this package.
    :param allow_unencrypted_secrets: with a non-local master, let a Kafka configuration holding secrets
        reach the executors even though ``spark.authenticate`` and ``spark.network.crypto.enabled`` are not
        both ``true`` (Spark's RPC then carries them unauthenticated and in plaintext). Default: refuse.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "topology",
        "tier",
        "handler",
        "value_deserializer",
        "key_deserializer",
        "result_path",
        "kafka_conn_id",
        "options",
        "cutoff",
    )
    template_fields_renderers = {"options": "json"}
    ui_color = "#f4a261"

    def __init__(
        self,
        *,
        topology: str,
        tier: int | str,
        handler: str,
        value_deserializer: str | None = None,
        key_deserializer: str | None = None,
        kafka_conn_id: str = KafkaRetryHook.default_conn_name,
        conn_id: str = "spark_default",
        result_path: str | None = None,
        options: Mapping[str, Any] | None = None,
        cutoff: int | str | datetime | None = None,
        partitions: Sequence[int] | None = None,
        application: str = "",
        name: str = "airflow-kafka-retry",
        allow_unencrypted_secrets: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application, conn_id=conn_id, name=name, **kwargs)
        self.topology = topology
        self.tier = tier
        self.handler = handler
        self.value_deserializer = value_deserializer
        self.key_deserializer = key_deserializer
        self.kafka_conn_id = kafka_conn_id
        self.result_path = result_path
        self.options = dict(options or {})
        self.cutoff = cutoff
        self.partitions = list(partitions) if partitions is not None else None
        self.allow_unencrypted_secrets = allow_unencrypted_secrets
        self._user_py_files = self.py_files
        self._user_files = self.files
        self._check_option_names(self.options)

    @staticmethod
    def _check_option_names(options: Mapping[str, Any]) -> None:
        known = {f.name for f in dataclasses.fields(DrainOptions)} - set(_OWN_PARAMETERS)
        own = sorted(set(options) & set(_OWN_PARAMETERS))
        if own:
            raise ValueError(f"pass {', '.join(own)} as operator argument(s), not in options")
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(known))}")

    # ------------------------------------------------------------------ building the run
    def drain_options(self) -> DrainOptions:
        """The run options from ``handler``, the deserializers and ``options`` (after templating)."""
        self._check_option_names(self.options)
        return DrainOptions(handler=self.handler, value_deserializer=self.value_deserializer or None,
                            key_deserializer=self.key_deserializer or None, **self.options)

    def cutoff_ms(self, context: Context) -> int:
        """The due-time cutoff of this run (see the ``cutoff`` parameter)."""
        value = self.cutoff
        if value is None or value == "":
            value = context.get("data_interval_end") or context.get("logical_date")
        return wall_clock_ms() if value is None else to_epoch_ms(value)

    def _use(self, submission: Submission) -> None:
        """Point the SparkSubmitOperator machinery at ``submission``."""
        self.application = submission.application
        self.application_args = submission.application_args
        self.py_files = ",".join(p for p in (self._user_py_files, submission.py_files) if p)
        self.conf = {**submission.spark_conf, **(self.conf or {})}
        master, deploy_mode = self._master()
        if master.startswith("local"):
            # the driver and executors run here: use this worker's Python and bundled Spark
            self.env_vars = {**local_spark_environment(), **(self.env_vars or {})}
        if deploy_mode == "cluster":
            # the driver runs elsewhere: Spark ships the credentials file into its working folder
            self.files = ",".join(p for p in (self._user_files, submission.kafka_config_file) if p)
            self.log.warning("cluster deploy mode: the topology (%s) and result_path (%s) must be reachable from "
                             "the Spark driver, e.g. as s3:// or hdfs:// URLs", self.topology,
                             submission.result_path)
        self._hook = None  # rebuilt by SparkSubmitOperator.execute with the arguments above

    def _master(self) -> tuple[str, str | None]:
        """The Spark connection's master and deploy mode."""
        self._hook = None
        connection = self._get_hook()._connection
        return str(connection.get("master") or ""), connection.get("deploy_mode")

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, built as ``SparkSubmitOperator`` builds it, submitting without the worker's secrets."""
        hook = super()._get_hook()
        hook.__class__ = IsolatedSparkSubmitHook  # same state; only ``submit`` differs
        return hook

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        options = self.drain_options()
        cutoff = self.cutoff_ms(context)
        master, deploy_mode = self._master()
        submission = prepare_submission(
            topology_path=self.topology, tier=self.tier, options=options,
            kafka_config=KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config(),
            master=master, deploy_mode=deploy_mode, spark_conf=self.conf, properties_file=self.properties_file,
            allow_unencrypted_secrets=self.allow_unencrypted_secrets,
            result_path=self.result_path or None, cutoff_ms=cutoff, partitions=self.partitions,
            application=self.application or None)
        self.log.info("reprocessing tier %s of %s with handler %s, cutoff %s; summary at %s", self.tier,
                      self.topology, options.handler, cutoff, submission.result_path)
        with submission:  # deletes the credentials file however the run ends
            self._use(submission)
            remove_result(submission.result_path)
            submit_error: BaseException | None = None
            try:
                super().execute(context)
            except Exception as exc:  # noqa: BLE001 - spark-submit exits non-zero when a partition failed
                submit_error = exc
            finally:  # Kubernetes cluster mode: Spark leaves the uploaded copies of the credentials behind
                if isinstance(self._hook, IsolatedSparkSubmitHook):
                    self._hook.delete_uploads(submission.workdir)
            summary = self._summary(submission, submit_error)
        document = summary.to_dict()
        self.log.info("%s: %s", summary.topic, json.dumps(document["totals"]))
        if not summary.ok:
            context["ti"].xcom_push(key="summary", value=document)
            raise AirflowException(failure_message(summary)) from submit_error
        if submit_error is not None:
            raise submit_error
        return document

    def _summary(self, submission: Submission, submit_error: BaseException | None) -> RunSummary:
        try:
            return read_result(submission.result_path)
        except SparkAppError as exc:
            raise AirflowException(f"the Spark application refused to start: {exc}") from None
        except ResultMissingError as exc:
            if submit_error is not None:
                raise submit_error from None
            raise AirflowException(str(exc)) from None
