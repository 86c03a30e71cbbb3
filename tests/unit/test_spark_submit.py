"""Building Spark submissions (py-files, arguments, credentials file) and the operator around them."""

from __future__ import annotations

import json
import os
import stat
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.summary import PartitionSummary, RunSummary
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.spark import app
from airflow_kafka_retry.spark.credentials import check_shippable, write_credentials_file
from airflow_kafka_retry.spark.pyfiles import build_py_files, top_level_sources, user_modules
from airflow_kafka_retry.spark.result import (
    ResultMissingError,
    SparkAppError,
    error_document,
    read_result,
    write_result,
)
from airflow_kafka_retry.spark.submit import APPLICATION, prepare_submission, spark_submit_command

SECRET = "s3cr3t-7f3a9c1d0e"
KAFKA_CONFIG = {
    "bootstrap.servers": "kafka-1:9092",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "svc-retry",
    "sasl.password": SECRET,
}
HANDLER = "tests.support.ledger_handler:indexed"
OPTIONS = DrainOptions(
    handler=HANDLER, value_deserializer="tests.support.ledger_handler:decode", batch_size=7
)
TOPOLOGY = str(Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml")


@pytest.fixture
def submission(tmp_path):
    sub = prepare_submission(
        topology_path=TOPOLOGY,
        tier=1,
        options=OPTIONS,
        kafka_config=KAFKA_CONFIG,
        master="local[2]",
        cutoff_ms=1234,
        tmp_dir=str(tmp_path),
    )
    yield sub
    sub.cleanup()


# ----------------------------------------------------------------------------- py-files
def test_py_files_zip_holds_the_package_and_the_handler_package(submission):
    names = zipfile.ZipFile(submission.py_files).namelist()
    for expected in (
        "airflow_kafka_retry/__init__.py",
        "airflow_kafka_retry/spark/app.py",
        "airflow_kafka_retry/engine/drain/partition.py",
        "airflow_kafka_retry/policy/topology/model.py",
        "tests/__init__.py",
        "tests/support/__init__.py",
        "tests/support/ledger_handler.py",
    ):
        assert expected in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert submission.shipped == ["airflow_kafka_retry", "tests"]


def test_py_files_ship_a_single_module_handler_and_skip_the_standard_library(tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "akr_single_module_handler.py").write_text("def handle(records):\n    pass\n")
    monkeypatch.syspath_prepend(str(code))
    options = DrainOptions(handler="akr_single_module_handler:handle", value_deserializer="json:loads")
    assert user_modules(options) == ["akr_single_module_handler", "json"]
    assert top_level_sources("json") == []
    shipped = build_py_files(tmp_path / "deps.zip", user_modules(options))
    names = zipfile.ZipFile(tmp_path / "deps.zip").namelist()
    assert "akr_single_module_handler.py" in names
    assert shipped == ["airflow_kafka_retry", "akr_single_module_handler"]
    assert not [n for n in names if n.startswith("json/")]


def test_py_files_name_a_handler_module_that_cannot_be_found(tmp_path):
    with pytest.raises(UserCodeError, match="no_such_handler_pkg"):
        build_py_files(tmp_path / "deps.zip", ["no_such_handler_pkg.handlers"])


# ----------------------------------------------------------------------------- credentials
def test_credentials_go_to_an_owner_only_file_never_into_the_command_line(submission):
    cmd = spark_submit_command(
        submission, master="local[2]", conf={"spark.ui.enabled": "false"}, spark_submit="spark-submit"
    )
    assert SECRET not in " ".join(cmd)
    assert SECRET not in json.dumps(submission.application_args)
    path = submission.kafka_config_file
    assert cmd[cmd.index("--kafka-config-file") + 1] == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(submission.workdir).st_mode) == 0o700
    with open(path) as fh:
        assert json.load(fh) == KAFKA_CONFIG
    assert cmd[:3] == ["spark-submit", "--master", "local[2]"]
    assert cmd[cmd.index("--py-files") + 1] == submission.py_files
    assert cmd[cmd.index("--py-files") + 2] == APPLICATION
    assert json.loads(cmd[cmd.index("--options-json") + 1]) == OPTIONS.to_dict()
    assert cmd[cmd.index("--cutoff-ms") + 1] == "1234"


def test_the_credentials_file_is_removed_after_the_run(tmp_path):
    with prepare_submission(
        topology_path=TOPOLOGY,
        tier="dlt",
        options=OPTIONS,
        kafka_config=KAFKA_CONFIG,
        master="local[2]",
        tmp_dir=str(tmp_path),
    ) as sub:
        assert os.path.exists(sub.kafka_config_file)
    assert not os.path.exists(sub.kafka_config_file)
    assert not os.path.exists(sub.workdir)


def test_a_failed_preparation_leaves_no_credentials_behind(tmp_path):
    bad = DrainOptions(handler="no_such_handler_pkg:handle")
    with pytest.raises(UserCodeError):
        prepare_submission(
            topology_path=TOPOLOGY,
            tier=0,
            options=bad,
            kafka_config=KAFKA_CONFIG,
            master="local[2]",
            tmp_dir=str(tmp_path),
        )
    assert list(tmp_path.iterdir()) == []


def test_callbacks_cannot_be_shipped_and_the_error_names_the_key_not_the_value():
    with pytest.raises(KafkaConfigError, match="'oauth_cb'") as err:
        check_shippable({**KAFKA_CONFIG, "oauth_cb": lambda conf: ("token", 0)})
    assert SECRET not in str(err.value)
    with pytest.raises(KafkaConfigError, match="bootstrap.servers"):
        check_shippable({"sasl.password": SECRET})


def test_the_credentials_file_is_created_owner_only_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        path = write_credentials_file(KAFKA_CONFIG, str(tmp_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


# ----------------------------------------------------------------------------- the app's driver checks
def test_app_options_are_checked_by_name():
    assert app.options_from_json(json.dumps(OPTIONS.to_dict())) == OPTIONS
    with pytest.raises(app.AppInputError, match="unknown option.*batchsize"):
        app.options_from_json('{"handler": "a.b:c", "batchsize": 3}')
    with pytest.raises(app.AppInputError, match="not valid JSON"):
        app.options_from_json("{handler")
    with pytest.raises(app.AppInputError, match="no handler"):
        app.options_from_json("{}")


def test_app_options_can_come_from_a_file(tmp_path):
    (tmp_path / "options.json").write_text(json.dumps(OPTIONS.to_dict()))
    assert app.options_from_json(f"@{tmp_path / 'options.json'}") == OPTIONS


def test_app_kafka_config_errors_never_quote_the_file(tmp_path):
    path = tmp_path / "kafka.json"
    path.write_text('{"sasl.password": "' + SECRET + '", oops}')
    with pytest.raises(app.AppInputError) as err:
        app.read_kafka_config(str(path))
    assert SECRET not in str(err.value)
    path.write_text(json.dumps({"sasl.password": SECRET}))
    with pytest.raises(app.AppInputError, match="bootstrap.servers") as err:
        app.read_kafka_config(str(path))
    assert SECRET not in str(err.value)


def test_app_refuses_a_missing_handler_before_touching_kafka(tmp_path, capsys):
    result = tmp_path / "out" / "summary.json"
    options = DrainOptions(handler="tests.support.no_such_module:handle")
    code = app.main(
        [
            "--topology",
            TOPOLOGY,
            "--tier",
            "1",
            "--options-json",
            json.dumps(options.to_dict()),
            "--kafka-config-file",
            str(tmp_path / "never-read.json"),
            "--result",
            str(result),
        ]
    )
    assert code == app.EXIT_BAD_INPUT
    with pytest.raises(SparkAppError, match="cannot import module 'tests.support.no_such_module'"):
        read_result(str(result))
    assert "cannot import module" in capsys.readouterr().err


def test_app_tier_run_repr_hides_the_kafka_config():
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(TOPOLOGY)
    run = app.TierRun(topology, topology.tier(0), OPTIONS, KAFKA_CONFIG, (0,), 1, 1)
    assert SECRET not in repr(run)


# ----------------------------------------------------------------------------- result documents
def test_result_documents_round_trip(tmp_path):
    summary = RunSummary(
        "t.yaml",
        1,
        "orders-retry-1",
        "g",
        "spark",
        5,
        1,
        9,
        [PartitionSummary("orders-retry-1", 0, "g", drained=3, succeeded=3)],
    )
    url = str(tmp_path / "a" / "b.json")
    write_result(url, summary.to_dict())
    assert read_result(url).to_dict() == summary.to_dict()
    write_result(url, error_document("bad handler"))
    with pytest.raises(SparkAppError, match="bad handler"):
        read_result(url)
    with pytest.raises(ResultMissingError):
        read_result(str(tmp_path / "missing.json"))


def test_result_documents_go_to_fsspec_urls():
    url = "memory://akr-test/run/summary.json"
    write_result(url, error_document("x"))
    with pytest.raises(SparkAppError):
        read_result(url)


# ----------------------------------------------------------------------------- the operator
@pytest.fixture
def airflow_connections(monkeypatch, tmp_path):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_CONFIG})
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


class FakeTI:
    dag_id, run_id, task_id, map_index = "retry_dag", "manual__2024-01-01T00:00:00+00:00", "tier_1", -1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _context() -> dict[str, Any]:
    return {
        "ti": FakeTI(),
        "data_interval_end": datetime(2024, 1, 2, tzinfo=UTC),
        "logical_date": None,
    }


def _operator(tmp_path, **kwargs):
    from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

    kwargs.setdefault("options", {"batch_size": 7})
    return SparkReprocessTierOperator(
        task_id="tier_1",
        topology=TOPOLOGY,
        tier=1,
        handler=HANDLER,
        value_deserializer="tests.support.ledger_handler:decode",
        result_path=str(tmp_path / "summary.json"),
        **kwargs,
    )


def _fake_spark(
    monkeypatch,
    seen: dict,
    partitions: list[PartitionSummary] | None = None,
    document: dict | None = None,
    fail: bool = False,
):
    """Replace SparkSubmitOperator.execute: record what would be submitted, write a result, maybe fail."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.providers.common.compat.sdk import AirflowException

    def fake_execute(self, context):
        args = self.application_args
        seen["args"] = list(args)
        seen["application"] = self.application
        seen["py_files"] = self.py_files
        seen["env_vars"] = dict(self.env_vars or {})
        credentials = args[args.index("--kafka-config-file") + 1]
        seen["credentials"] = credentials
        with open(credentials) as fh:
            seen["credentials_content"] = json.load(fh)
        seen["credentials_mode"] = stat.S_IMODE(os.stat(credentials).st_mode)
        result = args[args.index("--result") + 1]
        if document is not None:
            write_result(result, document)
        elif partitions is not None:
            summary = RunSummary(
                TOPOLOGY,
                1,
                "orders-retry-1",
                "orders-service-orders-retry-1",
                "spark",
                int(args[args.index("--cutoff-ms") + 1]),
                1,
                2,
                partitions,
            )
            write_result(result, summary.to_dict())
        if fail:
            raise AirflowException("Cannot execute: spark-submit ... Error code is: 1.")

    monkeypatch.setattr(SparkSubmitOperator, "execute", fake_execute)


def test_operator_template_fields():
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

    fields = set(SparkReprocessTierOperator.template_fields)
    assert {"topology", "tier", "handler", "result_path", "kafka_conn_id"} <= fields
    assert set(SparkSubmitOperator.template_fields) <= fields


def test_operator_rejects_unknown_options_when_the_dag_is_parsed(tmp_path):
    with pytest.raises(ValueError, match="unknown option.*batchsize"):
        _operator(tmp_path, options={"batchsize": 3})


def test_operator_submits_paths_only_and_returns_the_summary(tmp_path, monkeypatch, airflow_connections):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    seen: dict = {}
    _fake_spark(
        monkeypatch, seen, partitions=[PartitionSummary("orders-retry-1", 0, "g", drained=4, succeeded=4)]
    )
    op = _operator(tmp_path)
    context = _context()
    document = op.execute(context)
    assert document["status"] == "ok"
    assert document["engine"] == "spark"
    assert document["totals"]["drained"] == 4
    assert SECRET not in json.dumps(seen["args"])
    assert SECRET not in json.dumps(document)
    assert seen["credentials_content"] == KAFKA_CONFIG
    assert seen["credentials_mode"] == 0o600
    assert not os.path.exists(seen["credentials"]), "credentials file left behind"
    assert seen["application"].endswith("airflow_kafka_retry/spark/entrypoint.py")
    assert seen["py_files"].endswith("deps.zip")
    cutoff = int(seen["args"][seen["args"].index("--cutoff-ms") + 1])
    assert cutoff == int(datetime(2024, 1, 2, tzinfo=UTC).timestamp() * 1000)
    assert json.loads(seen["args"][seen["args"].index("--options-json") + 1])["batch_size"] == 7
    # a local master runs the app with this Python (unless the environment already says which)
    assert seen["env_vars"]["PYSPARK_PYTHON"] == sys.executable


def test_operator_fails_with_the_failed_partitions_and_their_errors(
    tmp_path, monkeypatch, airflow_connections
):
    from airflow.providers.common.compat.sdk import AirflowException

    seen: dict = {}
    _fake_spark(
        monkeypatch,
        seen,
        fail=True,
        partitions=[
            PartitionSummary("orders-retry-1", 0, "g", drained=4, succeeded=4, committed_offset=4),
            PartitionSummary(
                "orders-retry-1",
                1,
                "g",
                status="failed",
                committed_offset=40,
                error="RouteError: orders-retry-1[1] up to offset 60: transaction failed",
            ),
            PartitionSummary(
                "orders-retry-1", 2, "g", status="failed", error="KafkaConfigError: topic missing"
            ),
        ],
    )
    context = _context()
    with pytest.raises(AirflowException) as err:
        _operator(tmp_path).execute(context)
    message = str(err.value)
    assert "failed on 2 of 3 partition(s)" in message
    assert "partition 1: RouteError: orders-retry-1[1] up to offset 60: transaction failed" in message
    assert "partition 2: KafkaConfigError: topic missing" in message
    assert SECRET not in message
    assert context["ti"].xcom["summary"]["totals"]["failed_partitions"] == [1, 2]
    assert not os.path.exists(seen["credentials"])


def test_operator_reports_why_the_app_refused_to_start(tmp_path, monkeypatch, airflow_connections):
    from airflow.providers.common.compat.sdk import AirflowException

    seen: dict = {}
    _fake_spark(
        monkeypatch, seen, fail=True, document=error_document("handler 'x:y': cannot import module 'x'")
    )
    with pytest.raises(AirflowException, match="refused to start: handler 'x:y': cannot import module 'x'"):
        _operator(tmp_path).execute(_context())
    assert not os.path.exists(seen["credentials"])


def test_operator_reraises_a_spark_failure_without_a_result(tmp_path, monkeypatch, airflow_connections):
    from airflow.providers.common.compat.sdk import AirflowException

    seen: dict = {}
    _fake_spark(monkeypatch, seen, fail=True)
    with pytest.raises(AirflowException, match="Cannot execute"):
        _operator(tmp_path).execute(_context())
    assert not os.path.exists(seen["credentials"])


def test_operator_ignores_a_stale_result_of_an_earlier_try(tmp_path, monkeypatch, airflow_connections):
    from airflow.providers.common.compat.sdk import AirflowException

    write_result(str(tmp_path / "summary.json"), RunSummary("t", 1, "x", "g", "spark", 1, 1, 2).to_dict())
    _fake_spark(monkeypatch, {}, fail=True)
    with pytest.raises(AirflowException, match="Cannot execute"):
        _operator(tmp_path).execute(_context())


def test_operator_cutoff(tmp_path):
    from airflow_kafka_retry.operators.reprocess_arguments import to_epoch_ms

    assert to_epoch_ms(1700000000000) == 1700000000000
    assert to_epoch_ms("1700000000000") == 1700000000000
    assert to_epoch_ms("2024-01-02T00:00:00+00:00") == 1704153600000
    assert to_epoch_ms(datetime(2024, 1, 2)) == 1704153600000
    with pytest.raises(ValueError, match="cutoff"):
        to_epoch_ms("yesterday")
    op = _operator(tmp_path, cutoff="2024-01-02T00:00:00+00:00")
    assert op.cutoff_ms(_context()) == 1704153600000


def test_hook_reads_the_librdkafka_config_from_the_connection_extra(airflow_connections):
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    hook = KafkaRetryHook()
    assert hook.kafka_config() == KAFKA_CONFIG
    assert SECRET not in repr(hook)


def test_spark_submit_environment_withholds_airflow_connections_variables_and_config():
    from airflow_kafka_retry.spark.submit import spark_app_environment

    environ = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": "kafka://:pw@h",
        "AIRFLOW_VAR_API_TOKEN": "t",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:pw@db/airflow",
        "AIRFLOW_HOME": "/opt/airflow",
        "AIRFLOW_CTX_DAG_ID": "orders",
        "PATH": "/usr/bin",
        "AKR_LEDGER": "/tmp/l",
    }
    assert spark_app_environment(environ) == {
        "AIRFLOW_HOME": "/opt/airflow",
        "AIRFLOW_CTX_DAG_ID": "orders",
        "PATH": "/usr/bin",
        "AKR_LEDGER": "/tmp/l",
    }


def test_operator_hook_starts_spark_submit_without_the_workers_secrets(
    tmp_path, monkeypatch, airflow_connections
):
    from airflow.providers.apache.spark.hooks import spark_submit as provider_hook

    from airflow_kafka_retry.hooks.spark_submit import IsolatedSparkSubmitHook

    monkeypatch.setenv("AIRFLOW_VAR_API_TOKEN", "var-secret")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "fernet-secret")
    monkeypatch.setenv("AKR_INHERITED", "kept")
    started: dict = {}

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            started.update(cmd=cmd, **kwargs)
            self.stdout = iter(["Running Spark version 4.3.0\n"])

        def wait(self):
            return 0

    monkeypatch.setattr(provider_hook.subprocess, "Popen", FakePopen)
    operator = _operator(tmp_path, env_vars={"HANDLER_SETTING": "from-env-vars"})
    hook = operator._get_hook()
    assert isinstance(hook, IsolatedSparkSubmitHook)
    assert hook._connection["master"] == "local[2]"
    hook.submit("app.py")
    env = started["env"]
    assert env["AKR_INHERITED"] == "kept"
    assert env["HANDLER_SETTING"] == "from-env-vars"
    assert "AIRFLOW_CONN_KAFKA_DEFAULT" in os.environ  # the worker has it ...
    assert not [k for k in env if k.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__"))], sorted(env)
    assert KAFKA_CONFIG["sasl.password"] not in json.dumps(env)  # ... spark-submit does not
    assert hook._env == {"HANDLER_SETTING": "from-env-vars"}  # the hook's own state is left as it was


def test_on_kill_during_a_submit_still_sees_the_env_vars(tmp_path, monkeypatch, airflow_connections):
    from airflow.providers.apache.spark.hooks import spark_submit as provider_hook

    started: list[dict] = []

    # spark-submit still running when the task is killed; the YARN kill command is recorded
    class BlockingPopen:
        def __init__(self, cmd, **kwargs):
            started.append({"cmd": cmd, **kwargs})
            self.stdout = iter(())

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            if len(started) == 1:
                hook._yarn_application_id = "application_1_0001"
                hook.on_kill()
            return 0

        def poll(self):
            return None

        def kill(self):
            pass

    monkeypatch.setattr(provider_hook.subprocess, "Popen", BlockingPopen)
    hook = _operator(tmp_path, env_vars={"HADOOP_CONF_DIR": "/etc/hadoop"})._get_hook()
    hook.submit("app.py")
    submit, kill = started
    assert kill["cmd"] == ["yarn", "application", "-kill", "application_1_0001"]
    assert kill["env"]["HADOOP_CONF_DIR"] == "/etc/hadoop"
    assert "AIRFLOW_CONN_KAFKA_DEFAULT" in os.environ
    assert not [k for k in kill["env"] if k.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__"))]
