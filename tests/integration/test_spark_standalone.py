"""The Spark engine on a real Spark standalone cluster: a master and two workers, executors in their own JVMs.

One cluster for the module (``spark_cluster``, tests/support/spark_cluster_fixtures.py), with RPC
authentication and encryption on. Its secret reaches spark-submit only through a ``0600``
``spark-defaults.conf`` (``SPARK_CONF_DIR`` for the CLI, ``properties_file`` for the operator), and the Kafka
configuration (with a SASL password) through the credentials file the submission writes. The handler's
ledger file reaches the executors as ``spark.executorEnv.AKR_LEDGER``: executors of a cluster do not inherit
the driver's environment.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.processes import free_port
from testkit.spark_cluster import SparkCluster, SparkClusterError

from tests.integration.test_spark_app import OPTIONS as SPARK_OPTIONS, SparkEnvWatcher
from tests.integration.test_spark_operator_dag import SECRET as AIRFLOW_SECRET, _airflow_env, _json_lines
from tests.support import ledger
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 280
SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"
#: spark-submit's own bound: a run that hangs fails the test instead of the CI job
SUBMIT_TIMEOUT_S = 240.0
#: the CLI ledger's tiers on the cluster: main and the first retry tier (the later ones, the same app on
#: another tier, then drain on the local engine; every tier on a cluster: test_secure_spark's ledger)
CLUSTER_TIERS = 2

log = logging.getLogger(__name__)


def _has_spark_submit(folder: str) -> bool:
    return bool(folder) and os.path.isfile(os.path.join(folder, "spark-submit"))


def cluster_conf(ledger_file: str, events: Path | None = None) -> dict[str, str]:
    """The run's Spark properties, none of them secret (the auth settings come from the cluster's file)."""
    jvm = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": jvm,
        "spark.executor.memory": "512m",
        "spark.executor.extraJavaOptions": jvm,
        # both executors registered before the first task: one task per worker, each in its own JVM
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        "spark.executorEnv.AKR_LEDGER": ledger_file,
    }
    if events is not None:  # uncompressed, one file per application: searchable
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    return conf


def kafka_config_file(tmp: Path, bootstrap: str) -> Path:
    """The Kafka settings with a distinctive SASL password (librdkafka accepts it on PLAINTEXT), 0600."""
    path = tmp / "kafka.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"bootstrap.servers": bootstrap, "sasl.username": "svc", "sasl.password": SECRET}, fh)
    return path


def cli_drain(
    cluster: SparkCluster, topology_file: Path, tier: int, kafka_file: Path, conf: dict[str, str], **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``airflow-kafka-retry drain --engine spark --master <the cluster>`` as a user runs it."""
    cmd = [sys.executable, "-m", "airflow_kafka_retry.cli", "-v", "drain", "--engine", "spark"]
    cmd += ["--master", kw.pop("master", cluster.master_url), "--topology", str(topology_file)]
    cmd += ["--tier", str(tier), "--kafka-config", str(kafka_file)]
    cmd += ["--handler", f"{ledger.HANDLER_MODULE}:indexed"]
    cmd += ["--value-deserializer", f"{ledger.HANDLER_MODULE}:decode", "--batch-size", "20"]
    cmd += ["--chunk-size", "70"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    env = {**os.environ, **cluster.client_env(), "PYTHONPATH": str(REPO), **kw.pop("env", {})}
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=kw.pop("timeout", SUBMIT_TIMEOUT_S), check=False
    )


def executor_dirs(cluster: SparkCluster) -> dict[str, dict[int, list[Path]]]:
    """application id -> worker index -> that worker's executor folders for it (``work/app-*/<id>/``)."""
    apps: dict[str, dict[int, list[Path]]] = {}
    for index in range(cluster.worker_count):
        for app in sorted(cluster.worker_dir(index).glob("app-*")):
            apps.setdefault(app.name, {})[index] = sorted(p for p in app.iterdir() if p.is_dir())
    return apps


# ----------------------------------------------------------------------------- the ledger through the CLI
@pytest.fixture(scope="module")
def cli_ledger(
    spark_cluster: SparkCluster, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> SimpleNamespace:
    """The ledger scenario: main and the first retry tier one ``drain --engine spark --master spark://...``
    each, the later tiers on the local engine."""
    tmp = tmp_path_factory.mktemp("standalone-cli")
    ledger_file = ledger.ledger_path(tmp)
    topology = ledger.write_topology(ledger.make_topology("standalone"), tmp / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    events = tmp / "spark-events"
    events.mkdir()
    kafka_file = kafka_config_file(tmp, kafka_bootstrap)
    conf = cluster_conf(ledger_file, events)
    apps_before = set(executor_dirs(spark_cluster))
    watcher = SparkEnvWatcher(spark_cluster.secret, scope=str(spark_cluster.base_dir))
    watcher.start()
    results, seconds = [], []
    try:
        for tier in topology.tiers[:CLUSTER_TIERS]:
            started = time.monotonic()
            done = cli_drain(spark_cluster, tmp / "topology.yaml", tier.index, kafka_file, conf)
            seconds.append(round(time.monotonic() - started, 1))
            assert done.returncode == 0, f"tier {tier.index}: {done.stdout[-2000:]}\n{done.stderr[-5000:]}"
            results.append(done)
    finally:
        watcher.stop()
    log.warning("standalone CLI ledger: %s records, seconds per tier %s", COUNT, seconds)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    for tier in topology.tiers[CLUSTER_TIERS:]:
        assert run_local(topology, tier, {"bootstrap.servers": kafka_bootstrap}, options).ok
    apps = {k: v for k, v in executor_dirs(spark_cluster).items() if k not in apps_before}
    return SimpleNamespace(
        topology=topology,
        inputs=inputs,
        ledger_file=ledger_file,
        summaries=[json.loads(r.stdout) for r in results],
        output="\n".join(r.stdout + r.stderr for r in results),
        events=events,
        apps=apps,
        watcher=watcher,
        seconds=seconds,
    )


def test_cli_drains_main_and_a_retry_tier_on_the_cluster_exactly_once_with_executors_on_both_workers(
    cli_ledger, spark_cluster, kafka_bootstrap
):
    run = cli_ledger
    ledger.check_ledger(kafka_bootstrap, run.topology, run.inputs, run.ledger_file, PARTITIONS)
    assert [s["engine"] for s in run.summaries] == ["spark"] * CLUSTER_TIERS
    assert run.summaries[0]["totals"]["drained"] == COUNT
    # one application per tier, each with an executor JVM on both workers that ran a task of it
    assert len(run.apps) == CLUSTER_TIERS, sorted(run.apps)
    for app, workers in run.apps.items():
        assert sorted(workers) == list(range(spark_cluster.worker_count)), (app, workers)
        for index, folders in workers.items():
            assert len(folders) == 1, (app, index, folders)
            stderr = (folders[0] / "stderr").read_text(errors="replace")
            assert "CoarseGrainedExecutorBackend" in stderr, (app, index)
            assert "Running task" in stderr, f"{app}: worker {index}'s executor ran no task"
    # the master saw them, as applications of this cluster
    state = spark_cluster.master_state()
    assert state is not None
    finished = {a["id"]: a for a in state["completedapps"]}
    for app in run.apps:
        assert finished[app]["state"] == "FINISHED", finished[app]
    # the executor JVMs were seen as processes of their own, with this cluster's folders
    assert len(run.watcher.executor_jvms) >= 2 * CLUSTER_TIERS, run.watcher.executor_jvms


def test_no_secret_reaches_a_command_line_a_log_or_the_event_log(cli_ledger, spark_cluster):
    run = cli_ledger
    secrets = {"the Kafka SASL password": SECRET, "the cluster's auth secret": spark_cluster.secret}
    assert run.watcher.spark_submits, "the watcher never saw spark-submit; the ps check proves nothing"
    assert not run.watcher.cmdline_hits, run.watcher.cmdline_hits
    # the daemons' logs, every executor's stdout and stderr under the worker folders, the event log
    files = [*spark_cluster.log_paths(), *(p for p in run.events.rglob("*") if p.is_file())]
    for index in range(spark_cluster.worker_count):
        files += [p for p in spark_cluster.worker_dir(index).rglob("std*") if p.is_file()]
    assert len(files) >= 3 + 2 * CLUSTER_TIERS * 2 + CLUSTER_TIERS, files
    text = {path: path.read_text(errors="replace") for path in files}
    assert sum("SparkListenerEnvironmentUpdate" in t for t in text.values()) == CLUSTER_TIERS
    assert "spark.authenticate" in "".join(text.values()), "the event log lists no auth settings"
    for what, secret in secrets.items():
        found = [str(path) for path, content in text.items() if secret in content]
        assert not found, f"{what} is in {found}"
        assert secret not in run.output, f"{what} is in the CLI's output"
    # the web UIs of the master and the workers (what an operator of the cluster browses: applications,
    # executors and their launch commands) neither
    pages = [web_json(port) for port in (spark_cluster.master_web_port, *spark_cluster.worker_web_ports)]
    assert sum(len(page["finishedexecutors"]) for page in pages[1:]) >= 2 * CLUSTER_TIERS, pages
    assert "AKR_LEDGER" in json.dumps(pages), "the pages show no executor environment: the scan proves little"
    for what, secret in secrets.items():
        assert secret not in json.dumps(pages), f"{what} is in a web UI page"
    # the files holding the cluster's secret are the owner's alone
    for path in (
        spark_cluster.client_properties,
        spark_cluster.base_dir / "daemon-conf" / "spark-daemon.conf",
    ):
        assert spark_cluster.secret in path.read_text()
        assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)


def web_json(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as answer:
        return dict(json.loads(answer.read()))


def test_a_taken_port_fails_the_start_at_once_naming_the_daemon_with_its_log(tmp_path):
    cluster = SparkCluster(tmp_path / "cluster", ready_timeout=150)  # room for a loaded machine
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", cluster.master_port))
        taken.listen()
        with pytest.raises(SparkClusterError) as failed:
            cluster.start()
    message = str(failed.value)
    assert "Spark master exited (code 1) during start-up" in message, message
    assert "Address already in use: Service 'sparkMaster' failed after 0 retries (starting from " in message
    assert str(cluster.base_dir / "master" / "logs" / "master.log") in message
    assert cluster.master is not None
    assert not cluster.master.running


def test_a_second_cluster_starts_beside_a_running_one(spark_cluster, tmp_path):
    """Two xdist workers may each run a cluster: no fixed port (the REST submission server's 6066, once).

    The second has one worker (a master and a worker each bind what a second worker would): ready means the
    master lists it ALIVE, by its own web UI port."""
    with SparkCluster(tmp_path / "second", workers=1, ready_timeout=150) as second:  # a loaded machine
        assert second.master_url != spark_cluster.master_url
        assert not set(second.worker_web_ports) & set(spark_cluster.worker_web_ports)
    assert "RestSubmissionServer" not in (second.base_dir / "master" / "logs" / "master.log").read_text()


# ----------------------------------------------------------------------------- a master that does not answer
def test_a_master_that_does_not_answer_fails_with_an_error_naming_it(
    spark_cluster, tmp_path, kafka_bootstrap
):
    topology = ledger.write_topology(ledger.make_topology("nomaster"), tmp_path / "topology.yaml")
    ledger.produce_inputs(kafka_bootstrap, topology, 14, PARTITIONS)
    nobody = f"spark://127.0.0.1:{free_port()}"
    kafka_file = kafka_config_file(tmp_path, kafka_bootstrap)
    conf = cluster_conf(ledger.ledger_path(tmp_path))
    started = time.monotonic()
    done = cli_drain(spark_cluster, tmp_path / "topology.yaml", 0, kafka_file, conf, master=nobody)
    seconds = time.monotonic() - started
    log.warning(
        "drain against %s that nobody answers: exit %s after %.1f s", nobody, done.returncode, seconds
    )
    assert done.returncode == 2, done.stderr[-3000:]  # refused before anything started, not a failed run
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert f"Spark master {nobody} does not answer" in last, done.stderr[-3000:]
    assert not done.stdout, "a summary was printed: the run started"


def test_without_the_clusters_auth_settings_the_kafka_password_is_not_sent(spark_cluster, tmp_path):
    """The ledger runs passed the transport check because the cluster's settings were read: without them
    (an empty SPARK_CONF_DIR) the same drain is refused before anything starts."""
    (tmp_path / "topology.yaml").write_text("topic: never-read\ngroup_id: g\nattempts: 2\n")
    (tmp_path / "empty-conf").mkdir()
    kafka_file = kafka_config_file(tmp_path, "127.0.0.1:9")
    conf = cluster_conf(ledger.ledger_path(tmp_path))
    env = {"SPARK_CONF_DIR": str(tmp_path / "empty-conf")}
    done = cli_drain(spark_cluster, tmp_path / "topology.yaml", 0, kafka_file, conf, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"executors of master '{spark_cluster.master_url}' over Spark's RPC" in done.stderr, done.stderr
    assert "spark.authenticate, spark.network.crypto.enabled are not set" in done.stderr, done.stderr
    assert SECRET not in done.stderr


# ------------------------------------------------------------------------- the ledger through the operator
DAG_FILE = '''
"""Written by tests/integration/test_spark_standalone.py."""
from datetime import datetime

from airflow.sdk import DAG, chain

from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

ARGS = dict(
    topology={topology!r},
    handler="tests.support.ledger_handler:indexed",
    value_deserializer="tests.support.ledger_handler:decode",
    options={{"batch_size": 20, "chunk_size": 70}},
    conf={conf!r},
    properties_file={properties!r},
    cutoff="now",  # each tier drains what the one before routed (the default is the run's logical date)
    retries=0,
)

with DAG("akr_spark_standalone", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    chain(*[SparkReprocessTierOperator(task_id=f"tier_{{i}}", tier=i, **ARGS) for i in range({tiers})])
    SparkReprocessTierOperator(task_id="nowhere", tier=0, conn_id="spark_nowhere", **ARGS)
'''


def test_operator_drains_main_on_the_cluster_exactly_once_and_names_a_master_that_does_not_answer(
    spark_cluster, kafka_bootstrap, tmp_path
):
    """Main through the operator on the cluster, the retry tiers after it on the local engine (every tier on
    the cluster, one application each: the CLI ledger's test and test_secure_spark's); then the ledger."""
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("standalone-dag"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    host, _, port = spark_cluster.master_url.rpartition(":")
    nobody = free_port()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)  # its Kafka connection has a SASL password
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": host, "port": int(port)})
    env["AIRFLOW_CONN_SPARK_NOWHERE"] = json.dumps({"conn_type": "spark", "host": host, "port": nobody})
    # no spark-submit on the worker's PATH: the operator runs pyspark's own (the driver runs here)
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in folders if not _has_spark_submit(p))
    conf = {**cluster_conf(ledger_file), "spark.pyspark.python": sys.executable}
    Path(env["AIRFLOW__CORE__DAGS_FOLDER"], "akr_spark_standalone.py").write_text(
        DAG_FILE.format(
            topology=str(tmp_path / "topology.yaml"),
            conf=conf,
            properties=str(spark_cluster.client_properties),
            tiers=1,
        )
    )
    apps_before = set(executor_dirs(spark_cluster))
    seed_metadata_db(env, cwd=REPO)
    reserialize = run_airflow(env, "dags", "reserialize")
    assert reserialize.returncode == 0, reserialize.stderr[-3000:]
    started = time.monotonic()
    run = run_airflow(env, "dags", "test", "akr_spark_standalone", timeout=600)
    log.warning("standalone operator DAG: %.1f s", time.monotonic() - started)
    output = run.stdout + run.stderr
    (tmp_path / "airflow-output.txt").write_text(output)  # kept for debugging a failure
    [dag_run] = _json_lines(
        run_airflow(env, "dags", "list-runs", "akr_spark_standalone", "-o", "json").stdout
    )
    listed = run_airflow(
        env, "tasks", "states-for-dag-run", "akr_spark_standalone", dag_run["run_id"], "-o", "json"
    )
    states = {row["task_id"]: row["state"] for row in _json_lines(listed.stdout)}
    assert states == {"tier_0": "success", "nowhere": "failed"}, output[-5000:]

    config = {"bootstrap.servers": kafka_bootstrap}
    for tier in topology.tiers[1:]:  # what the operator's run routed, on the local engine
        assert run_local(topology, tier, config, SPARK_OPTIONS).ok
    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    apps = {k: v for k, v in executor_dirs(spark_cluster).items() if k not in apps_before}
    assert len(apps) == 1, sorted(apps)
    for app, workers in apps.items():  # an executor JVM of the application on both workers
        assert sorted(workers) == list(range(spark_cluster.worker_count)), (app, workers)
    # the task on a master nobody answers failed naming it, and started no application
    assert f"Spark master spark://127.0.0.1:{nobody} does not answer" in output, output[-5000:]
    assert AIRFLOW_SECRET not in output
    assert spark_cluster.secret not in output


# ----------------------------------------------------------------------------- user code on the executors
HANDLERS = """
import akr_exec_rates


def handle(records):
    for record in records:
        akr_exec_rates.rate(record)
"""


def test_a_module_only_the_driver_has_is_named_then_ships_with_spark_submit_pyfiles(
    spark_cluster, kafka_bootstrap, tmp_path
):
    """The handler imports a library on the driver's PYTHONPATH only: executors on the workers lack it."""
    handlers, library = tmp_path / "handlers", tmp_path / "library"
    (handlers / "akr_exec_handlers").mkdir(parents=True)
    (handlers / "akr_exec_handlers" / "__init__.py").write_text("")
    (handlers / "akr_exec_handlers" / "orders.py").write_text(HANDLERS)
    (library / "akr_exec_rates").mkdir(parents=True)
    (library / "akr_exec_rates" / "__init__.py").write_text("def rate(record):\n    return 1\n")
    topology = ledger.write_topology(ledger.make_topology("exec-imports"), tmp_path / "topology.yaml")
    ledger.produce_inputs(kafka_bootstrap, topology, 40, PARTITIONS)
    main = topology.tiers[0]
    kafka_file = kafka_config_file(tmp_path, kafka_bootstrap)

    def drain(conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "airflow_kafka_retry.cli", "drain", "--engine", "spark"]
        cmd += ["--master", spark_cluster.master_url, "--topology", str(tmp_path / "topology.yaml")]
        cmd += [
            "--tier",
            "0",
            "--kafka-config",
            str(kafka_file),
            "--handler",
            "akr_exec_handlers.orders:handle",
        ]
        # one executor (one core): the claim is about an executor's imports, not the spread
        one = {**cluster_conf(ledger.ledger_path(tmp_path)), "spark.cores.max": "1"}
        for key, value in {**one, **conf}.items():
            cmd += ["--conf", f"{key}={value}"]
        path = os.pathsep.join(str(p) for p in (REPO, handlers, library))  # the driver has both
        env = {**os.environ, **spark_cluster.client_env(), "PYTHONPATH": path}
        return subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S, check=False
        )

    failed = drain({})
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-3000:]
    summary = json.loads(failed.stdout)
    errors = [p["error"] for p in summary["partitions"]]
    assert len(errors) == PARTITIONS, summary
    for error in errors:
        assert "ExecutorImportError" in error, error
        assert "no module named 'akr_exec_rates'" in error, error
        assert "ship 'akr_exec_rates' as well" in error, error
        assert "ships airflow_kafka_retry, akr_exec_handlers in --py-files" in error, error
    # nothing moved: no offset committed, nothing routed
    offsets = ledger.committed(kafka_bootstrap, topology.consumer_group(main), main.topic, PARTITIONS)
    assert all(offset < 0 for offset in offsets.values()), offsets
    assert not any(ledger.tier_contents(kafka_bootstrap, topology).values())

    # shipped as a user would: a zip of the package, through spark.submit.pyFiles
    archive = shutil.make_archive(str(tmp_path / "akr_exec_rates"), "zip", library, "akr_exec_rates")
    done = drain({"spark.submit.pyFiles": archive})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    totals = json.loads(done.stdout)["totals"]
    assert totals["drained"] == 40, totals
    assert totals["succeeded"] == 40, totals
