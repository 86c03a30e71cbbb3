"""``SparkReprocessTierOperator``: reprocess one retry tier with Spark, one task per Kafka partition."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
from airflow_kafka_retry.hooks.spark_submit import IsolatedSparkSubmitHook
from airflow_kafka_retry.observability.lineage import lineage_server
from airflow_kafka_retry.operators.reprocess_arguments import REPROCESS_TEMPLATE_FIELDS
from airflow_kafka_retry.operators.reprocess_base import ReprocessTierMixin
from airflow_kafka_retry.operators.supervisor_watch import stop_when_supervisor_dies
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.topology.file import load_topology_from
from airflow_kafka_retry.spark.result import ResultMissingError, SparkAppError, read_result, remove_result
from airflow_kafka_retry.spark.staging import delete_own_folder, kubernetes_upload_path, upload_own_files
from airflow_kafka_retry.spark.submit import (
    Submission,
    local_spark_environment,
    prepare_submission,
    spark_submit_on_path,
)
from airflow_kafka_retry.spark.transport import effective_spark_conf

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.common.compat.sdk import Context

    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.notifications.dispatch import Notifier

__all__ = ["SparkReprocessTierOperator"]


class SparkReprocessTierOperator(ReprocessTierMixin, SparkSubmitOperator):
    """
    Reprocess the due records of one retry tier (or a DLT) with Spark: one Spark task per Kafka partition.

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
    other reaches the Spark application's environment. ``env_vars`` passes settings the handler needs,
    but not secrets: on YARN and Kubernetes they become ``--conf`` values (``spark.yarn.appMasterEnv.*``,
    ``spark.kubernetes.driverEnv.*``) on the ``spark-submit`` command line, visible to anyone who can
    list the worker's processes and kept in the application's properties. Give the handler its
    secrets through mounted secrets instead (a Kubernetes secret volume, ``spark.kubernetes.driver.
    secrets.*`` / ``spark.kubernetes.executor.secrets.*``, or a YARN-localized file readable only by
    the application) and read them from the file.

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
    :param options: further :class:`~airflow_kafka_retry.engine.drain.options.DrainOptions` fields
        (``batch_size``, ``chunk_size``, ``max_records``, ``transactional``...). (templated)
    :param cutoff: records due after this stay for a later run: epoch milliseconds, a datetime or an
        ISO-8601 string, or ``"now"`` (when draining starts: a run triggered by a tier's event trigger
        first waits until the wave it fired for is due); default: the run's data interval end, else its
        logical date, else now. (templated)
    :param partitions: reprocess only these partitions (default: all).
    :param on_dlt: notifiers (``BaseNotifier`` instances or callables ``f(context)``) called once, after
        the commit, when the run dead-lettered or dropped a record; ``context["kafka_retry_summary"]``
        is the run summary.
    :param window: ``"HH:MM-HH:MM"``: partitions still running when the window closes stop at their next
        chunk boundary (Spark tasks read the deadline from the options); outside the window nothing
        is read. (templated)
    :param timezone: IANA time zone of ``window`` (default UTC). (templated)
    :param max_run: stop partitions at their next chunk boundary this long after the task started:
        ``"2h"``, a timedelta or milliseconds. (templated)
    :param asset_server: the Kafka server (``host:port``) of the asset URIs ``kafka://<server>/<topic>``;
        when given, the next tier and the DLTs are outlets and each event's ``extra`` holds its
        record count. The topology path and tier must not be templated then.
    :param skip_missing_topic: a run that no tier wave started (a sweep, a manual run) is skipped when the
        tier's own topic does not exist yet (the event-mode DAG factory sets it).
    :param application: the ``.py`` application to submit; default: the entry point inside this package.
    :param allow_unencrypted_secrets: with a non-local master, let a Kafka configuration holding secrets
        reach the executors even though ``spark.authenticate`` and ``spark.network.crypto.enabled`` are not
        both ``true`` (Spark's RPC then carries them unauthenticated and in plaintext). Default: refuse.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        *REPROCESS_TEMPLATE_FIELDS,
        "result_path",
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
        on_dlt: Notifier | Sequence[Notifier] | None = (),
        window: str | None = None,
        timezone: str | None = None,
        max_run: str | int | timedelta | None = None,
        asset_server: str | None = None,
        skip_missing_topic: bool = False,
        application: str = "",
        name: str = "airflow-kafka-retry",
        allow_unencrypted_secrets: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(application=application, conn_id=conn_id, name=name, **kwargs)
        self._init_reprocess(
            topology=topology,
            tier=tier,
            handler=handler,
            value_deserializer=value_deserializer,
            key_deserializer=key_deserializer,
            kafka_conn_id=kafka_conn_id,
            options=options,
            cutoff=cutoff,
            partitions=partitions,
            on_dlt=on_dlt,
            window=window,
            timezone=timezone,
            max_run=max_run,
            asset_server=asset_server,
            skip_missing_topic=skip_missing_topic,
        )
        self.result_path = result_path
        self.allow_unencrypted_secrets = allow_unencrypted_secrets
        self._user_py_files = self.py_files
        self._user_files = self.files
        self._own_uploads: str | None = None  # Kubernetes cluster mode: the folder of the run's uploads
        self._kafka_config: dict[str, Any] | None = None  # while executing: whose credentials the hook masks

    def _use(self, submission: Submission) -> None:
        """Point the SparkSubmitOperator machinery at ``submission``."""
        self.application = submission.application
        self.application_args = submission.application_args
        self.conf = {**submission.spark_conf, **(self.conf or {})}
        master, deploy_mode = self._master()
        py_files, credentials = submission.py_files, submission.kafka_config_file
        self._own_uploads = None
        upload_path = kubernetes_upload_path(
            master, deploy_mode, effective_spark_conf(self.conf, self.properties_file)[0]
        )
        if upload_path:  # Spark would upload them and never delete its copies: upload them here
            staged = upload_own_files(upload_path, [credentials, py_files])
            if staged is not None:
                self._own_uploads, remote = staged
                py_files, credentials = remote[py_files], remote[credentials]
        self.py_files = ",".join(p for p in (self._user_py_files, py_files) if p)
        if master.startswith("local"):
            # the driver and executors run here: use this worker's Python and bundled Spark
            self.env_vars = {**local_spark_environment(), **(self.env_vars or {})}
        elif deploy_mode != "cluster" and shutil.which("spark-submit") is None:
            # client mode on a cluster: spark-submit and the driver run here; executors keep their own Python
            self.env_vars = {**spark_submit_on_path(), **(self.env_vars or {})}
        if deploy_mode == "cluster":
            # the driver runs elsewhere: Spark ships the credentials file into its working folder
            self.files = ",".join(p for p in (self._user_files, credentials) if p)
            self.log.warning(
                "cluster deploy mode: the topology (%s) and result_path (%s) must be reachable from "
                "the Spark driver, e.g. as s3:// or hdfs:// URLs",
                self.topology,
                submission.result_path,
            )
        self._hook = None  # rebuilt by SparkSubmitOperator.execute with the arguments above

    def _delete_own_uploads(self) -> None:
        """Kubernetes cluster mode: delete the folder :meth:`_use` uploaded the run's files to."""
        folder, self._own_uploads = self._own_uploads, None
        if folder is None:
            return
        if isinstance(self._hook, IsolatedSparkSubmitHook):
            self._hook.delete_uploads(folder)
        else:  # spark-submit never started
            delete_own_folder(folder)

    def _master(self) -> tuple[str, str | None]:
        """The Spark connection's master and deploy mode."""
        self._hook = None
        connection = self._get_hook()._connection
        return str(connection.get("master") or ""), connection.get("deploy_mode")

    def _get_hook(self) -> SparkSubmitHook:
        """
        The provider's hook, built as ``SparkSubmitOperator`` builds it.

        It submits without the worker's secrets.
        """
        hook = super()._get_hook()
        hook.__class__ = IsolatedSparkSubmitHook  # same state; only ``submit`` differs
        hook.kafka_config = self._kafka_config  # type: ignore[attr-defined]
        return hook

    def _supervisor_gone(self, reason: str) -> None:
        """
        In the supervisor watch's thread: end the Spark application with the provider's ``on_kill``.

        The task's thread is blocked reading ``spark-submit``'s output (or polling a standalone-cluster
        driver's status), so only another thread can end the run, and ``on_kill`` is the provider's one way
        to reach what runs elsewhere: ``spark-submit --kill`` of a standalone-cluster driver, the driver pod
        on Kubernetes, ``yarn application -kill``. It cannot be split into a signal here and the rest in the
        task's thread: its YARN kill runs only while ``spark-submit`` is alive. It only signals processes
        and asks the cluster manager; the task's thread then sees ``spark-submit`` end and fails the try.
        """
        self.on_kill()  # first: the task's log goes through the dead supervisor and may fail or block
        with contextlib.suppress(Exception):
            self.log.warning("%s: stopped the Spark application", reason)

    # ------------------------------------------------------------------ execute
    # SparkSubmitOperator.execute is typed to return None; this one returns the run summary (its XCom)
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        self.wait_for_wave(context)
        deadline, deadline_reason = self.deadline(wall_clock_ms())
        options = self.drain_options(deadline)
        cutoff = self.cutoff_ms(context)
        master, deploy_mode = self._master()
        kafka_config = KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config()
        self._kafka_config = kafka_config
        self._lineage_server = lineage_server(kafka_config)
        if self.skip_missing_topic:
            tier_topic = load_topology_from(str(self.topology)).select(self.tier).topic
            self.skip_when_tier_topic_is_missing(context, kafka_config, tier_topic)
        submission = prepare_submission(
            topology_path=self.topology,
            tier=self.tier,
            options=options,
            kafka_config=kafka_config,
            master=master,
            deploy_mode=deploy_mode,
            spark_conf=self.conf,
            properties_file=self.properties_file,
            allow_unencrypted_secrets=self.allow_unencrypted_secrets,
            result_path=self.result_path or None,
            cutoff_ms=cutoff,
            partitions=self.partitions,
            application=self.application or None,
        )
        self.log.info(
            "reprocessing tier %s of %s with handler %s, cutoff %s; summary at %s",
            self.tier,
            self.topology,
            options.handler,
            cutoff,
            submission.result_path,
        )
        with submission:  # deletes the credentials file however the run ends
            self._use(submission)
            remove_result(submission.result_path)
            submit_error: BaseException | None = None
            try:
                # a task whose supervisor died stops its Spark application (on_kill) rather than run
                # alongside the next try Airflow starts
                with stop_when_supervisor_dies(self._supervisor_gone):
                    super().execute(context)
            except Exception as exc:  # spark-submit exits non-zero when a partition failed
                submit_error = exc
            finally:  # Kubernetes cluster mode: the run's own uploaded files, credentials among them
                self._delete_own_uploads()
            summary = self._summary(submission, submit_error)
        document = self.report(
            context, summary, engine="Spark", deadline_reason=deadline_reason, cause=submit_error
        )
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
