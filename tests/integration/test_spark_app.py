"""The Spark engine end to end: the real app, submitted with ``spark-submit`` to ``local[2]``.

Spark start-up costs 10-20 s per submission on a small machine, so the suite keeps submissions
few: one ledger run through every tier (checked against the local engine, and scanned for the
Kafka secret), one run with crashing tasks, and a run that must refuse to start.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.spark.result import SparkAppError
from airflow_kafka_retry.spark.submit import run_spark_submit

from tests.support import ledger

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2
COUNT = 400
SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"
#: small and quick: no UI, a small driver heap, a JIT tuned for start-up rather than peak speed
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "512m",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
SPARK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1"}
OPTIONS = DrainOptions(
    handler=f"{ledger.HANDLER_MODULE}:indexed",
    value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
    batch_size=20,
    chunk_size=100,
)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- helpers
class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


@dataclass
class SparkRunner:
    """``run_tier(tier) -> RunSummary`` for the ledger scenario: one spark-submit of the real app per tier."""

    topology_file: Path
    kafka_config: dict[str, Any]
    options: DrainOptions = OPTIONS
    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=lambda: dict(SPARK_CONF))
    env: dict[str, str] = field(default_factory=lambda: dict(SPARK_ENV))
    output: list[str] = field(default_factory=list)  # everything spark-submit printed (driver and executors)
    logged: list[str] = field(default_factory=list)  # what the submitting side logged (the command line...)
    seconds: list[float] = field(default_factory=list)

    def __call__(self, tier: Tier) -> RunSummary:
        handler = _ListHandler(self.logged)
        submit_log = logging.getLogger("airflow_kafka_retry.spark")
        submit_log.addHandler(handler)
        old_level = submit_log.level
        submit_log.setLevel(logging.INFO)
        started = time.monotonic()
        try:
            return run_spark_submit(
                topology_path=self.topology_file,
                tier=tier.index,
                options=self.options,
                kafka_config=self.kafka_config,
                master=self.master,
                conf=self.conf,
                env=self.env,
                on_output=self.output.append,
            )
        finally:
            self.seconds.append(round(time.monotonic() - started, 1))
            submit_log.removeHandler(handler)
            submit_log.setLevel(old_level)


def _read_proc(pid: int, part: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{part}", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


class ProcessWatcher(threading.Thread):
    """Scans every process's command line and environment (what ``ps`` shows) for ``needle`` while it runs."""

    def __init__(self, needle: str) -> None:
        super().__init__(daemon=True)
        self.needle = needle.encode()
        self.hits: list[str] = []
        self.spark_processes: set[int] = set()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
                self.inspect(pid, _read_proc(pid, "cmdline"), _read_proc(pid, "environ"))

    def inspect(self, pid: int, cmdline: bytes, environ: bytes) -> None:
        """Look at one process (an unreadable or vanished part reads as empty)."""
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline or b"pyspark" in cmdline:
            self.spark_processes.add(pid)
        for part, data in (("cmdline", cmdline), ("environ", environ)):
            if self.needle in data:
                self.hits.append(f"/proc/{pid}/{part}: {data[:200]!r}")

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


class SparkEnvWatcher(ProcessWatcher):
    """:class:`ProcessWatcher` that tells the Spark application's processes apart from the rest.

    ``cmdline_hits``: any process whose command line holds the needle. ``spark_env_hits``: a process
    of the Spark application (spark-submit's JVM, its launcher, the Python driver, PySpark workers,
    executor JVMs) whose environment holds it. ``other_env_hits``: any other process whose
    environment holds it (the ``airflow`` CLI itself, which gets the connection from
    ``AIRFLOW_CONN_KAFKA_DEFAULT``; a decoy started with the full environment).
    ``spark_submits``/``spark_envs_read``/``executor_jvms`` count only processes that mention
    ``scope`` (this test's temp folder) in their command line or environment, not those of another
    test running meanwhile.
    """

    SPARK_MARKS = (b"org.apache.spark", b"pyspark", b"airflow_kafka_retry/spark/entrypoint.py")

    def __init__(self, needle: str, scope: str) -> None:
        super().__init__(needle)
        self.scope = scope.encode()
        self.cmdline_hits: list[str] = []
        self.spark_env_hits: dict[int, bytes] = {}
        self.other_env_hits: dict[int, bytes] = {}
        self.spark_submits: set[int] = set()  # the spark-submit JVMs seen
        self.spark_envs_read: set[int] = set()  # Spark processes whose (non-empty) environment was read
        self.executor_jvms: set[int] = set()  # executors in their own JVM (local-cluster, a real cluster)

    def inspect(self, pid: int, cmdline: bytes, environ: bytes) -> None:
        spark = any(mark in cmdline for mark in self.SPARK_MARKS)
        if spark and (self.scope in cmdline or self.scope in environ):
            self.spark_processes.add(pid)
            if environ:
                self.spark_envs_read.add(pid)
            if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
                self.spark_submits.add(pid)
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline:
                self.executor_jvms.add(pid)
        if self.needle in cmdline:
            self.cmdline_hits.append(f"/proc/{pid}/cmdline: {cmdline[:300]!r}")
        if self.needle in environ:
            self.hits.append(f"/proc/{pid}/environ")
            (self.spark_env_hits if spark else self.other_env_hits)[pid] = cmdline[:300]


def describe_process(cmdline: bytes) -> str:
    """``argv[0]`` and the main class / script / module of a command line, for assertion messages."""
    argv = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    main = [
        a
        for a in argv[1:]
        if a.startswith(("org.apache.spark.", "pyspark.")) or a.endswith((".py", "spark-class"))
    ]
    return " ".join([os.path.basename(argv[0]) if argv else "?", *main[:2]])


def normalized_totals(summary: RunSummary, topology: Topology) -> dict[str, Any]:
    """Run totals with topic names relative to the topology's main topic (for cross-engine comparison)."""
    totals = summary.to_dict()["totals"]
    totals["routed"] = {k.replace(topology.topic, "<main>"): v for k, v in totals["routed"].items()}
    totals["dlt_topics"] = {k.replace(topology.topic, "<main>"): v for k, v in totals["dlt_topics"].items()}
    return totals


def _committed(bootstrap: str, topology: Topology) -> dict[int, int]:
    return ledger.committed(bootstrap, topology.group_id, topology.topic, PARTITIONS)


# ----------------------------------------------------------------------------- the ledger through Spark
@pytest.fixture(scope="module")
def spark_ledger(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The ledger scenario run through every tier by spark-submit, with the event log on and ``ps``
    watched."""
    tmp = tmp_path_factory.mktemp("spark-ledger")
    ledger_file = ledger.ledger_path(tmp)
    topology = ledger.write_topology(ledger.make_topology("spark"), tmp / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    events = tmp / "spark-events"
    events.mkdir()
    runner = SparkRunner(
        topology_file=tmp / "topology.yaml",
        # a distinctive secret; librdkafka accepts sasl.password on a PLAINTEXT connection
        kafka_config={"bootstrap.servers": kafka_bootstrap, "sasl.username": "svc", "sasl.password": SECRET},
        # the event log, uncompressed and in one file per application, so it can be searched
        conf={
            **SPARK_CONF,
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        },
    )
    # the worker's environment holds the Kafka connection with its password, as a deployment sets it;
    # a decoy started with that whole environment shows the watcher can see an inherited secret
    watcher = SparkEnvWatcher(SECRET, scope=str(tmp))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(
            "AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": runner.kafka_config})
        )
        decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"], env=dict(os.environ))
        watcher.start()
        try:
            summaries = ledger.run_tiers(topology, runner)
        finally:
            watcher.stop()
            decoy.kill()
            decoy.wait()
    log.warning(
        "spark ledger: %s records, %s tiers, spark-submit seconds per tier %s",
        COUNT,
        len(summaries),
        runner.seconds,
    )
    return SimpleNamespace(
        topology=topology,
        inputs=inputs,
        ledger_file=ledger_file,
        summaries=summaries,
        runner=runner,
        watcher=watcher,
        events=events,
    )


def test_spark_engine_gives_every_record_the_home_the_local_engine_gives(
    spark_ledger, kafka_bootstrap, tmp_path
):
    run = spark_ledger
    ledger.check_ledger(kafka_bootstrap, run.topology, run.inputs, run.ledger_file, PARTITIONS)
    assert all(s.engine == "spark" for s in run.summaries)
    assert [sorted(p.partition for p in s.partitions) for s in run.summaries] == [
        list(range(PARTITIONS))
    ] * len(run.topology.tiers), "one Spark task per Kafka partition"
    first = run.summaries[0].to_dict()["totals"]
    assert first["drained"] == COUNT
    assert first["succeeded"] + sum(first["routed"].values()) == COUNT

    # the same scenario through the local engine: the same homes, the same per-tier counts
    local_ledger = ledger.ledger_path(tmp_path)
    local_topology = ledger.make_topology("spark-twin")
    local_inputs = ledger.produce_inputs(kafka_bootstrap, local_topology, COUNT, PARTITIONS)
    config = {"bootstrap.servers": kafka_bootstrap}
    local = ledger.run_tiers(local_topology, lambda tier: run_local(local_topology, tier, config, OPTIONS))
    ledger.check_ledger(kafka_bootstrap, local_topology, local_inputs, local_ledger, PARTITIONS)
    # the same records took the same path: each tier and the DLT hold the same ids, in the same order
    assert ledger.tier_contents(kafka_bootstrap, run.topology) == ledger.tier_contents(
        kafka_bootstrap, local_topology
    )
    assert [normalized_totals(s, run.topology) for s in run.summaries] == [
        normalized_totals(s, local_topology) for s in local
    ]


def test_kafka_credentials_appear_in_no_command_line_log_or_spark_event_log(spark_ledger):
    run = spark_ledger
    # the command lines and environments, as ps would show them, were watched while Spark ran
    watcher = run.watcher
    assert watcher.spark_submits, "the watcher never saw the spark-submit JVM; the check proves nothing"
    assert watcher.spark_envs_read, "the watcher read no Spark process's environment"
    assert watcher.other_env_hits, "the watcher missed the decoy that inherited AIRFLOW_CONN_KAFKA_DEFAULT"
    assert not watcher.cmdline_hits, watcher.cmdline_hits
    assert not watcher.spark_env_hits, (
        f"AIRFLOW_CONN_KAFKA_DEFAULT reached {len(watcher.spark_env_hits)} of {len(watcher.spark_envs_read)} "
        "Spark "
        f"processes: {sorted({describe_process(c) for c in watcher.spark_env_hits.values()})}"
    )
    commands = [line for line in run.runner.logged if line.startswith("spark-submit command:")]
    assert len(commands) == len(run.topology.tiers)
    assert "--kafka-config-file" in commands[0]
    # driver and executor logs (local mode: everything spark-submit printed), and our own logging
    assert len(run.runner.output) > 50
    assert not [line for line in run.runner.output if SECRET in line]
    assert not [line for line in run.runner.logged if SECRET in line]
    # the event log holds what the Spark UI shows, the environment tab included (sun.java.command
    # carries the application arguments: the path of the credentials file, never its content)
    logs = [p for p in run.events.rglob("*") if p.is_file()]
    assert len(logs) == len(run.topology.tiers)
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    assert "SparkListenerEnvironmentUpdate" in text
    # (Spark redacts the whole command when any of it matches spark.redaction.regex, e.g. a checkout
    # folder named "secrets"; then the path is hidden too)
    assert "kafka-config.json" in text or '"sun.java.command":"*********(redacted)"' in text
    assert SECRET not in text
    # the summaries (what the operator pushes to XCom) neither
    assert not [s for s in run.summaries if SECRET in str(s.to_dict())]
    # and the credentials files are gone, with the private folders that held them and the run summaries
    paths = {line.split("--kafka-config-file ")[1].split()[0] for line in commands}
    assert paths
    assert not [p for p in paths if os.path.exists(p)]
    results = {line.split("--result ")[1].split()[0] for line in commands}
    assert {os.path.dirname(p) for p in results} == {os.path.dirname(p) for p in paths}
    assert not [p for p in results if os.path.exists(os.path.dirname(p))]


# ----------------------------------------------------------------------------- a task killed mid-partition
def test_a_task_killed_mid_partition_is_retried_by_spark_and_nothing_is_lost_or_doubled(
    kafka_bootstrap, tmp_path
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("spark-kill"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    kills = tmp_path / "kills"
    kills.mkdir()
    options = DrainOptions(
        handler="tests.support.spark_kill_handler:crash_once",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=10,
        chunk_size=40,
    )
    runner = SparkRunner(
        topology_file=tmp_path / "topology.yaml",
        kafka_config={"bootstrap.servers": kafka_bootstrap},
        options=options,
        master="local[2,4]",  # local mode with up to 4 attempts per task
        env={
            **SPARK_ENV,
            "AKR_KILL_DIR": str(kills),
            "AKR_KILL_TOPIC": topology.topic,
            "AKR_KILL_AT_OFFSET": "60",
        },
    )

    # the kill is on the main topic, so only its run goes through Spark; the retry tiers then drain what
    # it routed with the local engine (the Spark engine on every tier is test_spark_engine_gives_...'s)
    killed = runner(topology.tiers[0])
    assert killed.ok, json.dumps(killed.to_dict()["partitions"], indent=1)[:3000]
    config = {"bootstrap.servers": kafka_bootstrap}
    for tier in topology.tiers[1:]:
        assert run_local(topology, tier, config, options).ok

    # every partition's first attempt died mid-partition (after the chunk [0, 40) was committed and
    # records 40..59 were handled), and Spark's retry resumed from the committed offset
    assert sorted(p.name for p in kills.iterdir()) == [f"{topology.topic}.{p}" for p in range(PARTITIONS)]
    assert [line for line in runner.output if "Lost task" in line], "Spark did not report the lost attempts"
    for partition in killed.partitions:
        assert partition.status == "ok"
        assert partition.start_offset == 40, partition
        assert partition.drained == COUNT // PARTITIONS - 40
    # nothing lost, nothing committed twice: one home per record, no duplicates in the DLT or the tiers
    ledger.check_ledger(
        kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, allow_duplicates=False, handled_once=False
    )
    for tier in topology.retry_tiers:
        keys = [m.key() for m in ledger.read_all(kafka_bootstrap, tier.topic)]
        assert len(keys) == len(set(keys)), f"duplicates in {tier.topic}"
    handled_twice = [i for i, n in ledger.processed_ids(ledger_file).items() if n > 1]
    assert handled_twice, (
        "the killed attempts handled records that their retries handled again (at least once)"
    )


# ----------------------------------------------------------------------------- refusing to start
def _bad_topology(topology: Topology, path: Path) -> None:
    path.write_text(yaml.safe_dump({"topic": topology.topic, "group_id": topology.group_id, "atempts": 4}))


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        # a handler that does not import is refused by the same check before the Spark context, through
        # the operator: test_spark_operator_dag's bad_handler task
        pytest.param("topology", "field 'atempts': unknown key", id="bad-topology"),
    ],
)
def test_bad_input_fails_on_the_driver_before_any_record_is_read(
    problem, expected, kafka_bootstrap, tmp_path
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("spark-refuse")
    ledger.produce_inputs(kafka_bootstrap, topology, 40, PARTITIONS)
    path = tmp_path / "topology.yaml"
    if problem == "topology":
        _bad_topology(topology, path)
        options = OPTIONS
    else:
        ledger.write_topology(topology, path)
        options = DrainOptions(handler="tests.support.no_such_handler:handle")
    output: list[str] = []
    started = time.monotonic()

    with pytest.raises(SparkAppError) as err:
        run_spark_submit(
            topology_path=path,
            tier=0,
            options=options,
            kafka_config={"bootstrap.servers": kafka_bootstrap},
            conf=SPARK_CONF,
            env=SPARK_ENV,
            on_output=output.append,
        )

    assert expected in str(err.value)
    log.warning("spark app refused %s after %.1f s", problem, time.monotonic() - started)
    assert [line for line in output if "refusing to start" in line and expected in line]
    assert not [line for line in output if "Running Spark version" in line], "a Spark context was started"
    assert all(offset < 0 for offset in _committed(kafka_bootstrap, topology).values()), "offsets moved"
    assert ledger.processed_ids(ledger_file) == {}


def test_cli_drain_with_the_spark_engine_prints_the_spark_run_summary(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("cli-spark")
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(topology, topology_file)
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 60, PARTITIONS)
    kafka = {"bootstrap.servers": kafka_bootstrap, "sasl.username": "svc", "sasl.password": SECRET}
    kafka_config = tmp_path / "kafka.json"
    kafka_config.write_text(json.dumps(kafka))
    s3_secret = f"s3-{uuid.uuid4().hex[:12]}"  # a secret-looking Spark property: masked in the logged command
    env_secret = f"env-{uuid.uuid4().hex[:12]}"  # an executor environment variable: any value may be a secret
    jvm_secret = f"jvm-{uuid.uuid4().hex[:12]}"  # a -D...Password= inside the driver's JVM options
    conf = [
        arg
        for key, value in {
            **SPARK_CONF,
            "spark.hadoop.fs.s3a.secret.key": s3_secret,
            "spark.executorEnv.AKR_SERVICE_AUTH": env_secret,
            "spark.driver.extraJavaOptions": (
                f"{SPARK_CONF['spark.driver.extraJavaOptions']} -Dakr.db.Password={jvm_secret}"
            ),
        }.items()
        for arg in ("--conf", f"{key}={value}")
    ]
    # the CLI runs on a worker whose environment holds the Kafka connection (and so its password);
    # SPARK_PRINT_LAUNCH_COMMAND makes spark-submit print the driver's java command line, JVM options included
    env = {
        **os.environ,
        **SPARK_ENV,
        "AKR_LEDGER": ledger_file,
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": kafka}),
        "SPARK_PRINT_LAUNCH_COMMAND": "1",
    }
    watcher = SparkEnvWatcher(SECRET, scope=str(tmp_path))
    watcher.start()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_kafka_retry.cli",
                "-v",
                "drain",
                "--engine",
                "spark",
                "--topology",
                str(topology_file),
                "--tier",
                "0",
                "--handler",
                f"{ledger.HANDLER_MODULE}:indexed",
                "--value-deserializer",
                f"{ledger.HANDLER_MODULE}:decode",
                "--kafka-config",
                str(kafka_config),
                *conf,
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=Path(__file__).parents[2],
        )
    finally:
        watcher.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["engine"] == "spark"
    assert summary["status"] == "ok"
    fates = [mode for mode, _, _ in inputs.records.values()]
    assert summary["totals"]["drained"] == 60
    assert summary["totals"]["succeeded"] == fates.count("ok")
    assert sorted(p["partition"] for p in summary["partitions"]) == [0, 1]
    # -v: spark-submit's output (driver and executors) reached stderr, so these checks can fail
    assert "Running Spark version" in done.stderr, done.stderr[-2000:]
    assert "Finished task" in done.stderr, done.stderr[-2000:]
    assert SECRET not in done.stdout + done.stderr
    [command] = [line for line in done.stderr.splitlines() if "spark-submit command:" in line]
    assert "--conf spark.hadoop.fs.s3a.secret.key=******" in command
    assert "spark.ui.enabled=false" in command
    assert "--conf spark.executorEnv.AKR_SERVICE_AUTH=******" in command
    assert "-XX:+UseSerialGC -Dakr.db.Password=******" in command
    [launch] = [line for line in done.stderr.splitlines() if line.startswith("Spark Command:")]
    assert "-Dakr.db.Password=******" in launch, launch  # spark-submit's own output, masked
    for secret in (s3_secret, env_secret, jvm_secret):
        assert secret not in done.stdout + done.stderr, secret
    # no Spark process got the worker's AIRFLOW_CONN_KAFKA_DEFAULT; the CLI itself had it (the watcher saw it)
    assert watcher.spark_submits, "the watcher saw no Spark process of this run"
    assert watcher.spark_envs_read, "the watcher saw no Spark process of this run"
    assert watcher.other_env_hits, "the watcher did not see the CLI's environment holding the secret"
    assert not watcher.cmdline_hits, watcher.cmdline_hits
    assert not watcher.spark_env_hits, sorted({describe_process(c) for c in watcher.spark_env_hits.values()})
