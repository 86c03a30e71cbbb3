"""Secrets on the Spark path: the RPC-protection check, the private result file, masked command lines,
cluster-mode staging defaults. (The real spark-submit runs are in tests/integration/test_spark_secrets.py.)"""

from __future__ import annotations

import collections
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.drain.summary import RunSummary
from airflow_kafka_retry.spark import app
from airflow_kafka_retry.spark.masking import OutputMasker, mask_command, mask_text
from airflow_kafka_retry.spark.result import (
    ResultMissingError,
    UntrustedResultError,
    read_result,
    remove_result,
    write_result,
)
from airflow_kafka_retry.spark.staging import cluster_mode_conf
from airflow_kafka_retry.spark.submit import prepare_submission, spark_submit_command
from airflow_kafka_retry.spark.transport import (
    UnencryptedSecretsError,
    check_secrets_transport,
    effective_spark_conf,
    is_local_master,
    secret_keys,
)

from tests.unit.test_spark_submit import (
    KAFKA_CONFIG,
    OPTIONS,
    SECRET,
    TOPOLOGY,
    _context,
    _fake_spark,
    _operator,
)

PROTECTED = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
PLAIN = {"bootstrap.servers": "kafka-1:9092"}


@pytest.fixture
def airflow_connections(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_CONFIG})
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


# ----------------------------------------------------------------------------- what counts as a secret
def test_secret_keys_are_sasl_and_ssl_key_material_not_public_certificates():
    config = {
        "bootstrap.servers": "b:9092",
        "sasl.username": "svc",
        "sasl.password": "p",
        "sasl.oauthbearer.client.secret": "c",
        "sasl.oauthbearer.config": "principal=x",
        "ssl.key.password": "k",
        "ssl.keystore.password": "ks",
        "ssl.key.pem": "-----BEGIN",
        "ssl.ca.pem": "ca",
        "ssl.certificate.pem": "cert",
        "ssl.key.location": "/mnt/secrets/key.pem",
        "sasl.mechanism": "PLAIN",
        "sasl.oauthbearer.assertion.private.key.passphrase": "pp",
        "security.protocol": "SASL_SSL",
    }
    assert secret_keys(config) == [
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.password",
        "ssl.key.password",
        "ssl.key.pem",
        "ssl.keystore.password",
    ]
    assert secret_keys({**PLAIN, "sasl.password": ""}) == []


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[2,4]", True),
        (" local[2] ", True),
        ("local-cluster[1,1,512]", False),
        ("spark://h:7077", False),
        ("yarn", False),
        ("k8s://https://k:6443", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_single_jvm_master_is_local(master, local):
    assert is_local_master(master) is local


# ----------------------------------------------------------------------------- the refusal
def test_secrets_to_a_cluster_without_rpc_protection_are_refused_naming_both_settings():
    with pytest.raises(UnencryptedSecretsError) as err:
        check_secrets_transport(KAFKA_CONFIG, master="yarn", spark_conf={"spark.ui.enabled": "false"})
    message = str(err.value)
    assert message.startswith(
        "the Kafka configuration holds secrets (sasl.password) and every Spark task carries "
        "it to the executors of master 'yarn' over Spark's RPC, which is not protected: "
        "spark.authenticate, spark.network.crypto.enabled are not set."
    )
    assert "Set spark.authenticate=true and spark.network.crypto.enabled=true" in message
    assert "allow_unencrypted_secrets=True" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("conf", "missing"),
    [
        ({"spark.authenticate": "true"}, "spark.network.crypto.enabled is not set"),
        (
            {"spark.network.crypto.enabled": "TRUE", "spark.authenticate": "false"},
            "spark.authenticate is not set",
        ),
        (
            {"spark.network.crypto.enabled": "true", "spark.authenticate": "yes"},
            "spark.authenticate is not set",
        ),
    ],
)
def test_the_refusal_names_the_one_missing_setting(conf, missing):
    with pytest.raises(UnencryptedSecretsError, match=missing):
        check_secrets_transport(KAFKA_CONFIG, master="spark://h:7077", spark_conf=conf)


def test_protected_rpc_local_masters_configs_without_secrets_and_the_explicit_opt_out_pass():
    check_secrets_transport(KAFKA_CONFIG, master="yarn", spark_conf={k: " True " for k in PROTECTED})
    check_secrets_transport(KAFKA_CONFIG, master="local[2]", spark_conf={})
    check_secrets_transport(
        {**PLAIN, "sasl.username": "svc", "ssl.key.location": "/mnt/k.pem"}, master="yarn", spark_conf={}
    )
    check_secrets_transport(KAFKA_CONFIG, master="yarn", spark_conf={}, allow_unencrypted_secrets=True)


def test_the_check_reads_spark_defaults_and_the_properties_file_and_conf_wins(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# cluster-wide\nspark.authenticate   true\nspark.network.crypto.enabled=true\n"
    )
    environ = {"SPARK_CONF_DIR": str(conf_dir)}
    merged, where = effective_spark_conf({}, environ=environ)
    assert merged == PROTECTED
    assert str(conf_dir / "spark-defaults.conf") in where
    check_secrets_transport(KAFKA_CONFIG, master="yarn", spark_conf=merged)
    # --conf overrides spark-defaults.conf, as in spark-submit
    merged, where = effective_spark_conf({"spark.network.crypto.enabled": "false"}, environ=environ)
    with pytest.raises(
        UnencryptedSecretsError,
        match=r"spark.network.crypto.enabled is not set \(looked in "
        r"--conf, .*spark-defaults.conf\)",
    ):
        check_secrets_transport(KAFKA_CONFIG, master="yarn", spark_conf=merged, where=where)
    # a properties file replaces spark-defaults.conf (as in spark-submit without --load-spark-defaults)
    props = tmp_path / "job.properties"
    props.write_text("spark.authenticate: true\n")
    merged, where = effective_spark_conf(None, str(props), environ=environ)
    assert merged == {"spark.authenticate": "true"}
    assert "spark-defaults" not in where


def test_prepare_submission_refuses_before_writing_anything(tmp_path):
    with pytest.raises(UnencryptedSecretsError, match="spark.authenticate, spark.network.crypto.enabled"):
        prepare_submission(
            topology_path=TOPOLOGY,
            tier=1,
            options=OPTIONS,
            kafka_config=KAFKA_CONFIG,
            master="spark://h:7077",
            spark_conf={"spark.ui.enabled": "false"},
            tmp_dir=str(tmp_path),
        )
    assert list(tmp_path.iterdir()) == [], "no credentials file may be written for a refused run"


def test_the_opt_out_reaches_the_driver_as_an_argument(tmp_path):
    with prepare_submission(
        topology_path=TOPOLOGY,
        tier=1,
        options=OPTIONS,
        kafka_config=KAFKA_CONFIG,
        master="yarn",
        allow_unencrypted_secrets=True,
        tmp_dir=str(tmp_path),
    ) as sub:
        assert sub.application_args[-1] == "--allow-unencrypted-secrets"
        assert app.build_parser().parse_args(sub.application_args).allow_unencrypted_secrets is True
    with prepare_submission(
        topology_path=TOPOLOGY,
        tier=1,
        options=OPTIONS,
        kafka_config=KAFKA_CONFIG,
        master="yarn",
        spark_conf=PROTECTED,
        tmp_dir=str(tmp_path),
    ) as sub:
        assert "--allow-unencrypted-secrets" not in sub.application_args


def test_operator_refuses_on_a_cluster_master_before_spark_submit(tmp_path, monkeypatch, airflow_connections):
    from airflow_kafka_retry.engine.drain.summary import PartitionSummary

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"}))
    seen: dict = {}
    _fake_spark(
        monkeypatch, seen, partitions=[PartitionSummary("orders-retry-1", 0, "g", drained=1, succeeded=1)]
    )
    with pytest.raises(
        UnencryptedSecretsError,
        match="master 'yarn'.*spark.authenticate, spark.network.crypto.enabled are not set",
    ):
        _operator(tmp_path, conf={"spark.ui.enabled": "false"}).execute(_context())
    assert seen == {}, "spark-submit was started"
    _operator(tmp_path, conf=dict(PROTECTED)).execute(_context())
    assert seen["credentials_content"] == KAFKA_CONFIG


# ----------------------------------------------------------------------------- cluster deploy mode
def test_yarn_cluster_mode_deletes_the_staging_folder_unless_told_otherwise(caplog):
    assert cluster_mode_conf("yarn", "cluster", {}) == {"spark.yarn.preserve.staging.files": "false"}
    assert cluster_mode_conf("yarn", "client", {}) == {}
    assert cluster_mode_conf("yarn", None, {}) == {}
    with caplog.at_level(logging.WARNING, logger="airflow_kafka_retry.spark.staging"):
        assert cluster_mode_conf("yarn", "cluster", {"spark.yarn.preserve.staging.files": "true"}) == {}
    assert "stays in the application's YARN staging folder" in caplog.text


def test_kubernetes_cluster_mode_warns_that_spark_keeps_the_uploaded_copy(caplog):
    with caplog.at_level(logging.WARNING, logger="airflow_kafka_retry.spark.staging"):
        conf = cluster_mode_conf(
            "k8s://https://k:6443", "cluster", {"spark.kubernetes.file.upload.path": "s3a://b/up"}
        )
    assert conf == {}
    assert "uploaded to s3a://b/up (the operator uploads it to a folder of its own" in caplog.text


def test_operator_in_yarn_cluster_mode_ships_the_file_with_the_cleanup_setting(
    tmp_path, monkeypatch, airflow_connections
):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}),
    )
    seen: dict = {}

    def fake_execute(self, context):
        seen.update(conf=dict(self.conf), files=self.files, result=self.application_args[-1])

    monkeypatch.setattr(SparkSubmitOperator, "execute", fake_execute)
    op = _operator(tmp_path, conf=dict(PROTECTED))
    with pytest.raises(Exception, match="wrote no result"):
        op.execute(_context())
    assert seen["conf"] == {**PROTECTED, "spark.yarn.preserve.staging.files": "false"}
    assert seen["files"].endswith("/kafka-config.json")
    assert not os.path.exists(seen["files"])


# ----------------------------------------------------------------------------- masking
def test_the_logged_command_masks_secret_looking_conf_values_but_keeps_paths():
    cmd = [
        "spark-submit",
        "--master",
        "yarn",
        "--conf",
        "spark.hadoop.fs.s3a.secret.key=S3SECRET",
        "--conf",
        "spark.hadoop.fs.s3a.access.key=AKIA123",
        "--conf",
        "spark.ssl.keyPassword=KP",
        "--conf",
        "spark.kubernetes.driverEnv.API_TOKEN=TOK",
        "--conf",
        "spark.sasl.x=SASL",
        "--conf",
        "spark.ui.enabled=false",
        "--keytab",
        "/etc/svc.keytab",
        "--db-password",
        "PW",
        "app.py",
        "--kafka-config-file",
        "/tmp/akr-spark-x/kafka-config.json",
        "--tier",
        "1",
    ]
    logged = mask_command(cmd)
    for value in ("S3SECRET", "AKIA123", "KP", "TOK", "SASL", "PW"):
        assert value not in logged.split(), logged
    assert "spark.hadoop.fs.s3a.secret.key=******" in logged
    assert "spark.ui.enabled=false" in logged
    assert "--keytab /etc/svc.keytab" in logged
    assert "--db-password ******" in logged
    assert "--kafka-config-file /tmp/akr-spark-x/kafka-config.json --tier 1" in logged
    assert (
        mask_text("cmd --conf spark.authenticate.secret=abc  other=1\tTOKEN=x")
        == "cmd --conf spark.authenticate.secret=******  other=1\tTOKEN=******"
    )


def test_environment_variables_and_jvm_options_set_through_conf_are_masked():
    cmd = [
        "spark-submit",
        "--conf",
        "spark.executorEnv.DB_URL=postgres://u:pw@db/x",
        "--conf",
        "spark.yarn.appMasterEnv.AUTH=A1B2",
        "--conf",
        "spark.kubernetes.driverEnv.X=Y",
        "--conf",
        "spark.driver.extraJavaOptions=-XX:+UseG1GC -Djavax.net.ssl.trustStorePassword=TSP -Dx=1",
        "--conf",
        "spark.executor.extraJavaOptions=-Ddb.Password=DBP",
        "app.py",
    ]
    logged = mask_command(cmd)
    for value in ("postgres://u:pw@db/x", "A1B2", "=Y", "TSP", "DBP"):
        assert value not in logged, logged
    assert "spark.executorEnv.DB_URL=******" in logged
    assert (
        "spark.driver.extraJavaOptions=-XX:+UseG1GC -Djavax.net.ssl.trustStorePassword=****** -Dx=1" in logged
    )
    assert "spark.executor.extraJavaOptions=-Ddb.Password=******" in logged
    assert (
        mask_text("spark.driver.extraJavaOptions=-Da.password=P")
        == "spark.driver.extraJavaOptions=-Da.password=******"
    )


def test_spark_submit_output_is_masked_by_rules_and_by_the_submissions_secret_values():
    mask = OutputMasker.for_submission(
        {
            "spark.executorEnv.SERVICE_AUTH": "envsecret1",
            "spark.ui.enabled": "false",
            "spark.ssl.enabled": "true",
            "spark.driver.extraJavaOptions": "-Dkafka.ssl.keystore.password=jvmsecret2 -Xmx1g",
        },
        {"bootstrap.servers": "b:9092", "sasl.username": "svc", "sasl.password": "kafkasecret3"},
    )
    assert sorted(mask.secrets) == ["envsecret1", "jvmsecret2", "kafkasecret3"]
    line = (
        "Parsed: (spark.executorEnv.SERVICE_AUTH,envsecret1) java -Dkafka.ssl.keystore.password=jvmsecret2 "
        "connecting with kafkasecret3 spark.ui.enabled=false"
    )
    # a masked value runs on to the next option or KEY=VALUE (it may hold spaces: issue 38 item 4)
    assert mask(line) == (
        "Parsed: (spark.executorEnv.SERVICE_AUTH,******) java -Dkafka.ssl.keystore.password=****** "
        "spark.ui.enabled=false"
    )
    assert mask("connecting with kafkasecret3 as svc") == "connecting with ****** as svc"
    assert mask("true 1234 svc") == "true 1234 svc", "short or ordinary values are not hunted for"


def test_the_cli_spark_path_masks_what_spark_submit_prints():
    """run_spark_submit masks each line before logging it, keeping it, or handing it to ``on_output``."""
    from airflow_kafka_retry.spark import running

    seen: list[str] = []

    class Printing:
        stdout = iter(["(spark.executorEnv.SERVICE_AUTH,envsecret1)\n", "-Da.password=jvmsecret2 ok\n"])

    tail: collections.deque[str] = collections.deque()
    running.stream(
        Printing(),
        seen.append,
        tail,
        OutputMasker.for_submission({"spark.executorEnv.SERVICE_AUTH": "envsecret1"}, {}),
    )
    assert seen == list(tail) == ["(spark.executorEnv.SERVICE_AUTH,******)", "-Da.password=******"]


def test_the_operator_hook_masks_its_command_line_more_widely_than_the_provider(
    tmp_path, airflow_connections
):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    op = _operator(tmp_path, conf={"spark.hadoop.fs.s3a.access.key": "AKIA123", "spark.db.password": "PW"})
    hook = op._get_hook()
    cmd = hook._build_spark_submit_command("app.py")
    assert "AKIA123" in SparkSubmitHook._mask_cmd(hook, cmd)  # the provider masks secret/password keys only
    logged = hook._mask_cmd(cmd)
    assert "AKIA123" not in logged
    assert "PW" not in logged
    assert "spark.hadoop.fs.s3a.access.key=******" in logged


def test_spark_submit_command_applies_the_submissions_own_conf_under_the_callers(tmp_path):
    with prepare_submission(
        topology_path=TOPOLOGY,
        tier=1,
        options=OPTIONS,
        kafka_config=PLAIN,
        master="yarn",
        deploy_mode="cluster",
        tmp_dir=str(tmp_path),
    ) as sub:
        cmd = spark_submit_command(sub, master="yarn", spark_submit="spark-submit")
        assert "spark.yarn.preserve.staging.files=false" in cmd
        cmd = spark_submit_command(
            sub,
            master="yarn",
            spark_submit="spark-submit",
            conf={"spark.yarn.preserve.staging.files": "true"},
        )
        assert "spark.yarn.preserve.staging.files=true" in cmd
        assert "spark.yarn.preserve.staging.files=false" not in cmd


# ----------------------------------------------------------------------------- the result file
def _summary() -> dict:
    return RunSummary("t.yaml", 1, "orders-retry-1", "g", "spark", 5, 1, 9).to_dict()


def test_the_default_result_is_a_new_file_in_a_private_per_run_folder(tmp_path):
    with (
        prepare_submission(
            topology_path=TOPOLOGY,
            tier=1,
            options=OPTIONS,
            kafka_config=PLAIN,
            master="local[2]",
            tmp_dir=str(tmp_path),
        ) as first,
        prepare_submission(
            topology_path=TOPOLOGY,
            tier=1,
            options=OPTIONS,
            kafka_config=PLAIN,
            master="local[2]",
            tmp_dir=str(tmp_path),
        ) as second,
    ):
        assert os.path.dirname(first.result_path) == first.workdir != second.workdir
        assert stat.S_IMODE(os.stat(first.workdir).st_mode) == 0o700
        assert not os.path.lexists(first.result_path), (
            "the driver creates the result; nothing may be there before"
        )
        write_result(first.result_path, _summary())
        assert stat.S_IMODE(os.lstat(first.result_path).st_mode) == 0o600
        assert first.read_summary().to_dict() == _summary()
        assert not os.path.lexists(first.result_path), "the result is deleted once read"
    assert not os.path.exists(first.workdir)


def test_the_driver_never_writes_through_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    result = tmp_path / "shared" / "summary.json"
    result.parent.mkdir()
    result.symlink_to(victim)
    with pytest.raises(UntrustedResultError, match="appeared while the run was going"):
        write_result(str(result), _summary())
    assert victim.read_text() == "precious"
    dangling = tmp_path / "shared" / "dangling.json"
    dangling.symlink_to(tmp_path / "created-by-the-attacker.json")
    with pytest.raises(UntrustedResultError):
        write_result(str(dangling), _summary())
    assert not (tmp_path / "created-by-the-attacker.json").exists()


def test_the_reader_refuses_a_symlinked_or_foreign_result_and_a_planted_fifo(tmp_path):
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**_summary(), "topic": "forged"}))
    link = tmp_path / "summary.json"
    link.symlink_to(forged)
    with pytest.raises(UntrustedResultError, match="is a symlink; not following it"):
        read_result(str(link))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedResultError, match="not a regular file"):
        read_result(str(fifo))  # would block forever if opened without O_NONBLOCK
    with pytest.raises(ResultMissingError):
        read_result(str(tmp_path / "missing.json"))


def test_removing_a_stale_result_removes_a_symlink_not_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "summary.json"
    link.symlink_to(victim)
    remove_result(str(link))
    assert not os.path.lexists(link)
    assert victim.read_text() == "precious"


def test_the_driver_refuses_a_taken_result_path_before_reading_anything(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    result = tmp_path / "summary.json"
    result.symlink_to(victim)
    code = app.main(
        [
            "--topology",
            TOPOLOGY,
            "--tier",
            "1",
            "--options-json",
            json.dumps(OPTIONS.to_dict()),
            "--kafka-config-file",
            str(tmp_path / "never-read.json"),
            "--result",
            str(result),
        ]
    )
    assert code == app.EXIT_BAD_INPUT
    assert f"the result path {result} already holds a symlink" in capsys.readouterr().err
    assert victim.read_text() == "precious"


def test_an_operator_run_leaves_no_result_behind(tmp_path, monkeypatch, airflow_connections):
    from airflow_kafka_retry.engine.drain.summary import PartitionSummary

    seen: dict = {}
    _fake_spark(
        monkeypatch, seen, partitions=[PartitionSummary("orders-retry-1", 0, "g", drained=1, succeeded=1)]
    )
    op = _operator(tmp_path)
    op.result_path = None  # the default: the submission's private folder
    assert op.execute(_context())["totals"]["drained"] == 1
    result = Path(seen["args"][seen["args"].index("--result") + 1])
    assert result.parent == Path(seen["credentials"]).parent
    assert not result.parent.exists()
    op = _operator(tmp_path)  # an explicit path: deleted once read as well
    op.execute(_context())
    assert not (tmp_path / "summary.json").exists()


# ----------------------------------------------------------------------------- executors resolving
# credentials
def test_an_oauth_callback_travels_as_its_import_path_and_executors_import_it():
    import functools

    from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, consumer_config, producer_config
    from airflow_kafka_retry.spark.credentials import check_shippable

    from tests.support.oauth_token import mounted_token

    config = {
        **PLAIN,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": mounted_token,
    }
    shipped = check_shippable(config)
    assert shipped["oauth_cb"] == "tests.support.oauth_token:mounted_token"
    json.dumps(shipped)  # what goes into the credentials file
    # no secret travels: such a configuration is not refused on a cluster without protected RPC
    check_secrets_transport(shipped, master="yarn", spark_conf={})
    # each executor imports the callback itself
    assert consumer_config(shipped, "g")["oauth_cb"] is mounted_token
    assert producer_config(shipped, None)["oauth_cb"] is mounted_token
    # a lambda or a partial (e.g. a managed-Kafka token provider bound to a region) cannot travel
    for callback in (lambda conf: ("t", 0), functools.partial(mounted_token)):
        with pytest.raises(KafkaConfigError, match="'oauth_cb' holds a"):
            check_shippable({**config, "oauth_cb": callback})


# ----------------------------------------------------------------------------- the hook's other processes
def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def test_every_provider_hook_method_that_starts_a_process_gets_the_stripped_environment():
    import inspect

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_kafka_retry.hooks.spark_submit import STATUS_AND_KILL_METHODS, IsolatedSparkSubmitHook

    starting = {
        name
        for name, fn in vars(SparkSubmitHook).items()
        if inspect.isfunction(fn) and "subprocess" in _code_names(fn.__code__)
    }
    # a provider upgrade that starts a process elsewhere must be looked at (and added to
    # STATUS_AND_KILL_METHODS)
    assert starting == {"submit", *STATUS_AND_KILL_METHODS}
    for name in STATUS_AND_KILL_METHODS:
        method = getattr(IsolatedSparkSubmitHook, "_base_on_kill" if name == "on_kill" else name)
        assert type(method.__globals__["subprocess"]).__name__ == "_StrippedSubprocess", name
        assert method.__code__ is getattr(SparkSubmitHook, name).__code__, (
            f"{name} is not the provider's own code"
        )


def test_the_cluster_mode_fallback_reads_only_a_credentials_file_of_its_own_user(tmp_path, monkeypatch):
    shipped = tmp_path / "kafka-config.json"  # where --files puts it: the driver's working folder
    shipped.write_text(json.dumps(PLAIN))
    monkeypatch.chdir(tmp_path)
    assert app.read_kafka_config("/gone/on/the/worker/kafka-config.json") == PLAIN
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner to another user needs root")
    os.chown(shipped, 65534, 65534)  # left by another user in a shared working folder
    with pytest.raises(app.AppInputError, match="kafka-config.json belongs to another user"):
        app.read_kafka_config("/gone/on/the/worker/kafka-config.json")


# The Kubernetes uploads (the operator's own folder, deleted after the run): tests/unit/test_spark_uploads.py
