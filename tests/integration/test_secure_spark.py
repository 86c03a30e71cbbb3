"""
The tier runs' drain through spark-submit on the secured broker (issue 48).

On a Spark standalone cluster (a master and a worker from pyspark's ``spark-class``; the executors in JVMs
of their own; RPC authenticated and encrypted), the tier role drains main and every retry tier exactly once
with exactly its printed ACLs. The CA named by ``ssl.ca.location`` exists only where the submission is
prepared, and is deleted from there before ``spark-submit`` starts: the driver and the executors can only use
the copy the submission carries (each names the private copy it wrote in its log; gone once it is done).
With the event log on, the SASL password is in no command line nor environment (``/proc/*/`` of every
process, while the runs go on), and neither it nor the cluster's secret is in spark-submit's raw output, the
daemons' and executors' logs, the worker's folders, the event log, or the master's and worker's web UIs.

A CA file that is not there fails clearly, naming it (cheap: ``local[2]``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.spark.running import deadline
from airflow_kafka_retry.spark.submit import (
    local_spark_environment,
    prepare_submission,
    run_spark_submit,
    spark_app_environment,
    spark_submit_command,
)
from testkit.spark_cluster import SparkCluster

from tests.integration.test_spark_app import OPTIONS, SPARK_CONF, SPARK_ENV, SparkEnvWatcher
from tests.integration.test_spark_standalone import cluster_conf, executor_dirs, web_json
from tests.support import ledger
from tests.support.secure_fixtures import RoleUsers

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Tier
    from airflow_kafka_retry.sandbox.kafka_secure import SecureKafka

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 70
#: spark-submit's own bound: a run that hangs fails the test instead of the CI job
SUBMIT_TIMEOUT_S = 240.0
COPY_LINE = re.compile(
    r"ssl\.ca\.location: the submission's copy of (\S+), written to (\S+) "
    r"on (executor host|the driver's host)"
)

log = logging.getLogger(__name__)


@dataclass
class SubmitSideCa:
    """
    One spark-submit per tier; the CA exists only where the submission is prepared, and only until then.

    ``kafka_config["ssl.ca.location"]`` names ``submit_side``: the CA is copied there, the submission is
    prepared (which packs it), the copy is deleted, then ``spark-submit`` runs. Its raw output (unmasked) and
    command lines are kept for the secret scan.
    """

    cluster: SparkCluster
    topology_file: Path
    kafka_config: dict[str, Any]
    ca_source: Path
    conf: dict[str, str]
    work: Path
    env: dict[str, str] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def __call__(self, tier: Tier) -> RunSummary:
        submit_side = Path(self.kafka_config["ssl.ca.location"])
        shutil.copyfile(self.ca_source, submit_side)
        started = time.monotonic()
        with prepare_submission(
            topology_path=self.topology_file,
            tier=tier.index,
            options=OPTIONS,
            kafka_config=self.kafka_config,
            master=self.cluster.master_url,
            spark_conf=self.conf,
            tmp_dir=str(self.work),  # the watcher tells this run's processes by this folder
            environ=self.env,  # the cluster's spark-defaults.conf: its RPC is authenticated and encrypted
        ) as submission:
            submit_side.unlink()  # from here on, only the submission carries the CA
            cmd = spark_submit_command(submission, master=self.cluster.master_url, conf=self.conf)
            self.commands.append(cmd)
            with (
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=self.env,
                    start_new_session=True,
                ) as process,
                deadline(process, SUBMIT_TIMEOUT_S) as expired,
            ):
                assert process.stdout is not None
                output = process.stdout.read()
                process.wait()
            self.output.append(output)
            self.seconds.append(round(time.monotonic() - started, 1))
            assert not expired.is_set(), f"tier {tier.index}: spark-submit hung\n{output[-3000:]}"
            return submission.read_summary()


@pytest.fixture(scope="module")
def standalone_ledger(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimpleNamespace]:
    """
    The ledger through every tier on a cluster of its own, as the tier role with its printed ACLs alone.

    One worker of 2 cores: one executor per application, in a JVM of its own, running both tasks (a second
    worker would cost its start and an executor's on every tier; test_spark_standalone covers the spread).
    The cluster starts while the secured broker (if this xdist worker has not started it yet), the users, the
    ACLs and the inputs are made.
    """
    tmp = tmp_path_factory.mktemp("secure-standalone")
    cluster = SparkCluster(tmp / "spark-cluster", workers=1, cores=2, ready_timeout=180)  # room for load
    starting = concurrent.futures.ThreadPoolExecutor(1)
    started_cluster = starting.submit(cluster.start)
    try:
        secure_kafka: SecureKafka = request.getfixturevalue("secure_kafka")
        yield _run_ledger(cluster, started_cluster, secure_kafka, tmp)
    finally:
        started_cluster.cancel()
        starting.shutdown(wait=True)
        cluster.stop()


def _run_ledger(
    cluster: SparkCluster,
    started_cluster: concurrent.futures.Future[SparkCluster],
    secure_kafka: SecureKafka,
    tmp: Path,
) -> SimpleNamespace:
    users = RoleUsers(secure_kafka, ["tiers"])
    topology = ledger.write_topology(ledger.make_topology("secure-spark"), tmp / "topology.yaml")
    users.grant(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]))
    ledger_file = ledger.ledger_path(tmp)
    inputs = ledger.produce_inputs(users.internal, topology, COUNT, PARTITIONS)
    events = tmp / "spark-events"
    events.mkdir()
    (tmp / "submit-side").mkdir()
    config = users.config("tiers")
    ca_source = Path(config["ssl.ca.location"])
    config["ssl.ca.location"] = str(tmp / "submit-side" / "ca.pem")
    env = {
        **spark_app_environment(os.environ),
        **local_spark_environment(),
        **cluster.client_env(),
        "PYTHONPATH": str(REPO),
    }
    conf = cluster_conf(ledger_file, events)
    runner = SubmitSideCa(cluster, tmp / "topology.yaml", config, ca_source, conf, tmp, env)
    started_cluster.result(timeout=cluster.ready_timeout + 30)  # its own deadline fails it first
    apps_before = set(executor_dirs(cluster))
    watcher = SparkEnvWatcher(config["sasl.password"], scope=str(tmp))
    watcher.start()
    started = time.monotonic()
    try:
        summaries = ledger.run_tiers(topology, runner)
    finally:
        watcher.stop()
    log.warning(
        "secured standalone ledger: cluster ready in %.1f s; %s records, %.1f s, seconds per tier %s",
        cluster.start_seconds or 0.0,
        COUNT,
        time.monotonic() - started,
        runner.seconds,
    )
    apps = {k: v for k, v in executor_dirs(cluster).items() if k not in apps_before}
    return SimpleNamespace(
        topology=topology,
        inputs=inputs,
        ledger_file=ledger_file,
        users=users,
        config=config,
        runner=runner,
        summaries=summaries,
        cluster=cluster,
        events=events,
        apps=apps,
        watcher=watcher,
    )


def test_the_tier_role_drains_every_tier_on_the_cluster_exactly_once_with_the_ca_the_submission_carries(
    standalone_ledger,
):
    run = standalone_ledger
    ledger.check_ledger(run.users.internal, run.topology, run.inputs, run.ledger_file, PARTITIONS)
    assert run.summaries[0].to_dict()["totals"]["drained"] == COUNT
    submit_side = run.config["ssl.ca.location"]
    assert not os.path.exists(submit_side)
    # the driver used its own copy of the CA, not the path it was given
    for index, output in enumerate(run.runner.output):
        drivers = [m for m in COPY_LINE.finditer(output) if m.group(3) != "executor host"]
        assert [m.group(1) for m in drivers] == [submit_side], f"tier {index}: {output[-3000:]}"
        assert not os.path.exists(os.path.dirname(drivers[0].group(2))), drivers[0].group(0)
    # one application per tier, its executor in a JVM of its own on a worker; each task wrote its own copy,
    # named in the executor's log, and deleted it when it ended
    assert len(run.apps) == len(run.topology.tiers), sorted(run.apps)
    for app, workers in run.apps.items():
        assert sum(len(folders) for folders in workers.values()) == 1, (app, workers)
        copies = []
        for folders in workers.values():
            for folder in folders:
                stderr = (folder / "stderr").read_text(errors="replace")
                found = [m for m in COPY_LINE.finditer(stderr) if m.group(3) == "executor host"]
                assert ("Running task" in stderr) == bool(found), f"{app} {folder}: {stderr[-3000:]}"
                copies += found
        assert len(copies) >= PARTITIONS, (app, [m.group(0) for m in copies])
        for match in copies:
            assert match.group(1) == submit_side, match.group(0)
            assert match.group(2) != submit_side, match.group(0)
            assert not os.path.exists(match.group(2)), match.group(0)
            assert not os.path.exists(os.path.dirname(match.group(2))), match.group(0)


def test_no_secret_reaches_a_command_line_an_environment_a_log_the_event_log_or_a_web_ui(
    standalone_ledger,
):
    run = standalone_ledger
    cluster = run.cluster
    secrets = {"the tier role's SASL password": run.config["sasl.password"], "the cluster's secret": ""}
    secrets["the cluster's secret"] = cluster.secret
    # every process's command line and environment while the runs went on (the cluster's secret is in its
    # executors' environment, as Spark hands it over: test_spark_standalone checks the command lines for it)
    assert run.watcher.spark_submits, "the watcher never saw spark-submit; the ps check proves nothing"
    assert len(run.watcher.executor_jvms) >= len(run.topology.tiers), run.watcher.executor_jvms
    assert not run.watcher.hits, run.watcher.hits
    assert not run.watcher.cmdline_hits, run.watcher.cmdline_hits
    # the daemons' logs, everything under the workers' folders for these applications, the event log
    files = [*cluster.log_paths(), *(p for p in run.events.rglob("*") if p.is_file())]
    for workers in run.apps.values():
        for folders in workers.values():
            files += [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    data = {path: path.read_bytes() for path in files}
    events = [d for d in data.values() if b"SparkListenerEnvironmentUpdate" in d]
    assert len(events) == len(run.topology.tiers), "the event log of some tier is missing"
    assert all(b"spark.authenticate" in d for d in events), "the event log lists no auth settings"
    pages = json.dumps([web_json(port) for port in (cluster.master_web_port, *cluster.worker_web_ports)])
    assert "AKR_LEDGER" in pages, "the pages show no executor environment: the scan proves little"
    for what, secret in secrets.items():
        found = [str(path) for path, content in data.items() if secret.encode() in content]
        assert not found, f"{what} is in {found}"
        assert not any(secret in output for output in run.runner.output), (
            f"{what} is in spark-submit's output"
        )
        assert not any(secret in " ".join(cmd) for cmd in run.runner.commands), f"{what} is in the command"
        assert secret not in pages, f"{what} is in a web UI page"


def test_a_ca_file_that_is_not_there_fails_naming_it(secure_kafka, tmp_path):
    role_users = RoleUsers(secure_kafka, ["tiers"])
    topology = ledger.write_topology(ledger.make_topology("secure-spark-ca"), tmp_path / "topology.yaml")
    role_users.grant(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]))
    ledger.produce_inputs(role_users.internal, topology, 10, PARTITIONS)
    config = {**role_users.config("tiers"), "ssl.ca.location": str(tmp_path / "no-such-ca.pem")}
    output: list[str] = []
    try:
        summary = run_spark_submit(
            topology_path=tmp_path / "topology.yaml",
            tier=0,
            options=OPTIONS,
            kafka_config=config,
            master="local[2]",
            conf=SPARK_CONF,
            env=SPARK_ENV,
            on_output=output.append,
        )
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
    else:
        message = json.dumps(summary.to_dict())
        assert not summary.ok, message[:2000]
    assert "ssl.ca.location" in message, message[-2000:]
    assert "no-such-ca.pem" in message, message[-2000:]
    assert config["sasl.password"] not in message + "\n".join(output)
    offsets = ledger.committed(role_users.internal, topology.group_id, topology.topic, PARTITIONS)
    assert all(o < 0 for o in offsets.values()), "offsets moved"
