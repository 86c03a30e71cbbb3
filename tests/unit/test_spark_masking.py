"""Masking what the Spark path logs (issue 38, item 4).

* A secret value with spaces is masked whole: ``mask_text`` used to mask only its first word.
* A value is masked *wherever* it appears only when its key looks secret; the value of an environment
  variable set through Spark whose name does not look secret is masked where it stands as a word of its
  own, not inside another name (an ``APP=orders`` masked ``orders-driver-1`` into ``******-driver-1``,
  and the Spark provider then tracked, and would kill, a pod of that wrong name).
* The operator's hook masks the Kafka connection's secrets in what ``spark-submit`` prints, as the
  command-line path does.
"""

from __future__ import annotations

from airflow_kafka_retry.spark.masking import OutputMasker, mask_command, mask_text
from airflow_kafka_retry.spark.result import write_result

from tests.unit.test_spark_secrets import PROTECTED, airflow_connections  # noqa: F401 - a fixture
from tests.unit.test_spark_submit import SECRET, _context, _operator
from tests.unit.test_spark_uploads import _summary, kubernetes_cluster  # noqa: F401 - a fixture


def test_a_secret_value_with_spaces_is_masked_whole():
    assert mask_text("API_TOKEN=abc def") == "API_TOKEN=******"
    assert (
        mask_text(
            "spark-submit --conf spark.kubernetes.driverEnv.API_TOKEN=abc def --conf spark.ui.enabled=false"
        )
        == "spark-submit --conf spark.kubernetes.driverEnv.API_TOKEN=****** --conf spark.ui.enabled=false"
    )
    assert mask_text('db.password="two words" next=1') == "db.password=****** next=1"
    assert (
        mask_text("spark.driver.extraJavaOptions=-Da.password=P Q -Dx=1")
        == "spark.driver.extraJavaOptions=-Da.password=****** -Dx=1"
    )
    # one argument of a command line: the whole value, spaces and all
    assert mask_command(["spark-submit", "--conf", "spark.executorEnv.API_TOKEN=abc def"]) == (
        "spark-submit --conf spark.executorEnv.API_TOKEN=******"
    )
    spaced = OutputMasker.for_submission(
        {"spark.driver.extraJavaOptions": "-Da.password=pass word -Xmx1g"}, {}
    )
    assert spaced.secrets == ["pass word"]


def test_an_environment_value_is_masked_as_a_word_not_inside_other_names():
    mask = OutputMasker.for_submission(
        {"spark.executorEnv.APP": "orders", "spark.executorEnv.API_TOKEN": "tok3n"},
        {"sasl.password": "kafkasecret3"},
    )
    assert mask("pod name: orders-5f3a9c-driver") == "pod name: orders-5f3a9c-driver"
    assert mask("(spark.executorEnv.APP,orders) app orders started") == (
        "(spark.executorEnv.APP,******) app ****** started"
    )
    # values whose key looks secret are masked wherever they appear, inside other words too
    assert mask("x-tok3n-y Bearer kafkasecret3.") == "x-******-y Bearer ******."


def test_the_hook_path_masks_kafka_secrets_and_tracks_the_real_driver_pod(
    tmp_path,
    monkeypatch,
    kubernetes_cluster,  # noqa: F811 - the fixture above
):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    seen: dict = {}

    def printing_execute(self, context):
        hook = self._hook = self._get_hook()
        hook._process_spark_submit_log(
            iter(
                [
                    f"INFO handler: connecting as svc-retry with {SECRET}\n",
                    "INFO LoggingPodStatusWatcherImpl: pod name: orders-5f3a9c-driver\n",
                    "INFO LoggingPodStatusWatcherImpl: Application finished\n",
                ]
            )
        )
        seen["pod"] = hook._kubernetes_driver_pod
        seen["logged"] = "\n".join(hook._last_submit_log_lines)  # each line as the provider logs it
        args = self.application_args
        write_result(args[args.index("--result") + 1], _summary())

    monkeypatch.setattr(SparkSubmitOperator, "execute", printing_execute)
    op = _operator(tmp_path, conf=PROTECTED, env_vars={"APP": "orders"})
    assert op.execute(_context())["status"] == "ok"
    assert "connecting as svc-retry with" in seen["logged"]
    # (the driver pod the provider tracks and would kill, whether the hook path logged a Kafka secret)
    assert (seen["pod"], SECRET in seen["logged"]) == ("orders-5f3a9c-driver", False)
