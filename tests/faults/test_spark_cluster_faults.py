"""Cases 20-22: faults only a Spark cluster has, on a standalone master with two workers (1 core each).

The handler (``tests/support/executor_kill_handler.py``) stops in partition 0's second chunk and waits; the
test waits until partition 1's task has finished (its offsets committed to the end, so its executor is idle)
and then SIGKILLs a process of the cluster: the executor JVM running partition 0 (case 20), the driver,
spark-submit's JVM (case 21, then the run is started again, as Airflow retries a task), or that executor's
worker with everything it started, for good (case 22). Each time the first chunk of partition 0 is
committed and its second is not: whatever handled it again is limited to that chunk, and nothing is lost
or doubled.
The worker loss ends the module's cluster with one worker: it runs last.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.spark.submit import SparkSubmitError, run_spark_submit

from tests.faults.helpers import options
from tests.support import ledger
from tests.support.ledger import FaultInput

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Topology
    from testkit.spark_cluster import SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2
COUNT = 240  # 120 per partition: chunks 0-49, 50-99, 100-119
CHUNK = 50
KILL_AT = 70  # partition 0 stops at offset 70: 50-69 handled, chunk 50-99 not committed
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")
WAIT_S = 120.0
JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
KILL_OPTIONS = DrainOptions(
    handler="tests.support.executor_kill_handler:wait_to_be_killed", batch_size=10, chunk_size=CHUNK
)


def wait_for(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """``check()``'s first truthy value, polled; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"waited {timeout:g}s for {what}"
        time.sleep(0.1)
    return value


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def ancestor(pid: int, mark: bytes) -> int:
    """The nearest process above ``pid`` (itself included) whose command line holds ``mark``."""
    current = pid
    while current > 1:
        if mark in _cmdline(current):
            return current
        current = int(Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()[1])
    raise AssertionError(f"no process above {pid} runs {mark!r}")


@dataclass
class ClusterRun:
    """One tier-0 run of the fault ledger on the cluster, in a thread, with the handler's kill point."""

    cluster: SparkCluster
    bootstrap: str
    tmp: Path
    topology: Topology | None = None

    def __post_init__(self) -> None:
        self.ledger_file = ledger.ledger_path(self.tmp)
        self.topology_file = self.tmp / "topology.yaml"
        topology = ledger.make_fault_topology("spark-cluster")
        self.topology = ledger.write_fault_topology(topology, self.topology_file)
        specs = [FaultInput(MODES[i % len(MODES)]) for i in range(COUNT)]
        self.inputs = ledger.produce_fault_inputs(self.bootstrap, self.topology, specs, PARTITIONS)
        self.markers = self.tmp / "markers"
        self.markers.mkdir()
        self.output: list[str] = []
        self.pool = concurrent.futures.ThreadPoolExecutor(1)

    def submit(self) -> concurrent.futures.Future[RunSummary]:
        assert self.topology is not None
        kill_env = {
            "AKR_LEDGER": self.ledger_file,
            "AKR_KILL_DIR": str(self.markers),
            "AKR_KILL_TOPIC": self.topology.topic,
            "AKR_KILL_PARTITION": "0",
            "AKR_KILL_AT_OFFSET": str(KILL_AT),
        }
        conf = {
            "spark.ui.enabled": "false",
            "spark.driver.memory": "512m",
            "spark.driver.extraJavaOptions": JVM,
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": JVM,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            **{f"spark.executorEnv.{k}": v for k, v in kill_env.items()},
        }
        return self.pool.submit(
            run_spark_submit,
            topology_path=self.topology_file,
            tier=0,
            options=KILL_OPTIONS,
            kafka_config={"bootstrap.servers": self.bootstrap},
            master=self.cluster.master_url,
            conf=conf,
            env=self.cluster.client_env(),
            on_output=self.output.append,
            timeout_s=300,
        )

    def stopped_at(self) -> tuple[int, int]:
        """(pid of the Python worker, offset) where partition 0's handler waits to be killed."""
        assert self.topology is not None
        marker = self.markers / f"{self.topology.topic}.0"
        text = wait_for(lambda: marker.exists() and marker.read_text().strip(), "the handler's kill point")
        pid, offset = text.split()
        return int(pid), int(offset)

    def wait_partition_1_done(self) -> None:
        assert self.topology is not None
        end = sum(1 for _, p, _ in self.inputs.records.values() if p == 1)
        group = self.topology.consumer_group(self.topology.tier(0))
        wait_for(
            lambda: ledger.committed(self.bootstrap, group, self.topology.topic, PARTITIONS)[1] == end,
            "partition 1 to commit its last offset",
        )

    def finish(self, summary: RunSummary, killed_offset: int) -> tuple[ledger.Account, list[str]]:
        """The later tiers on the local engine, the full ledger, and the ids handled twice (all in the chunk
        partition 0 was killed in: offsets ``CHUNK``..``killed_offset``)."""
        assert self.topology is not None
        assert summary.ok, summary.to_dict()["partitions"]
        [p0] = [p for p in summary.partitions if p.partition == 0]
        assert p0.start_offset == CHUNK, p0  # resumed after the committed first chunk
        for tier in self.topology.tiers[1:]:
            later = run_local(self.topology, tier, {"bootstrap.servers": self.bootstrap}, options())
            assert later.ok, later.to_dict()["partitions"]
        account = ledger.account(
            self.bootstrap, self.topology, self.inputs, self.ledger_file, PARTITIONS, handled_once=False
        )
        twice = sorted((i for i, n in ledger.processed_ids(self.ledger_file).items() if n > 1), key=int)
        where = {i: self.inputs.records[i][1:] for i in twice}
        outside = {i: w for i, w in where.items() if not (w[0] == 0 and CHUNK <= w[1] < killed_offset)}
        assert not outside, f"handled again outside the killed chunk: {outside}"
        assert twice, "nothing was handled twice: the kill did not land inside an uncommitted chunk"
        self.pool.shutdown(wait=False)
        return account, twice


def retried_on(cluster: SparkCluster, app: str) -> list[int]:
    """The workers whose executor of ``app`` ran a retried task attempt (``Running task N.1``)."""
    found = []
    for index in range(cluster.worker_count):
        for stderr in (cluster.worker_dir(index) / app).glob("*/stderr"):
            if re.search(r"Running task \d+\.[1-9]", stderr.read_text(errors="replace")):
                found.append(index)
    return found


def _worker_of(cluster: SparkCluster, executor_dir: Path) -> int:
    [index] = [i for i in range(cluster.worker_count) if cluster.worker_dir(i) in executor_dir.parents]
    return index


# ----------------------------------------------------------------------------- case 20
@pytest.mark.fault_case(
    "20",
    "the executor JVM running partition 0 SIGKILLed in the partition's 2nd chunk (at offset 70, chunk 50-99 "
    "not committed), once partition 1's task had finished; Spark standalone, 2 workers x 1 core",
)
def test_an_executor_killed_mid_partition_is_retried_on_the_other_worker(
    spark_cluster, kafka_bootstrap, tmp_path, fault_result
):
    run = ClusterRun(spark_cluster, kafka_bootstrap, tmp_path)
    future = run.submit()
    pid, offset = run.stopped_at()
    executor = ancestor(pid, b"CoarseGrainedExecutorBackend")
    executor_dir = Path(os.readlink(f"/proc/{executor}/cwd"))  # <worker>/work/app-*/<executor id>
    killed_worker = _worker_of(spark_cluster, executor_dir)
    run.wait_partition_1_done()
    os.kill(executor, signal.SIGKILL)
    summary = future.result(timeout=300)

    assert retried_on(spark_cluster, executor_dir.parent.name) == [1 - killed_worker], "\n".join(
        run.output[-40:]
    )
    account, twice = run.finish(summary, offset)
    fault_result(
        "Spark lost the executor and ran partition 0's task again on the other worker's executor; it "
        f"resumed at the committed offset {CHUNK} and the run finished; {len(twice)} records of the killed "
        "chunk were handled again, none outside it; no copy in any tier or DLT",
        account,
    )


# ----------------------------------------------------------------------------- case 21
@pytest.mark.fault_case(
    "21",
    "the driver (spark-submit's JVM) SIGKILLed while partition 0 was in its 2nd chunk (offset 70, chunk "
    "50-99 not committed), then the run started again as an Airflow retry does; Spark standalone, 2 workers",
)
def test_a_killed_driver_leaves_the_next_run_to_finish_exactly_once(
    spark_cluster, kafka_bootstrap, tmp_path, fault_result
):
    run = ClusterRun(spark_cluster, kafka_bootstrap, tmp_path)
    future = run.submit()
    pid, offset = run.stopped_at()
    executor = ancestor(pid, b"CoarseGrainedExecutorBackend")
    run.wait_partition_1_done()
    [driver] = [
        p
        for p in (int(d) for d in os.listdir("/proc") if d.isdigit())
        if b"org.apache.spark.deploy.SparkSubmit" in _cmdline(p)
        and str(run.topology_file).encode() in _cmdline(p)
    ]
    os.kill(driver, signal.SIGKILL)
    with pytest.raises(SparkSubmitError, match="wrote no result"):
        future.result(timeout=300)
    # the application's executors end without their driver (nothing left handling the killed chunk)
    wait_for(lambda: not _cmdline(executor), "the orphaned executor JVM to exit")
    wait_for(lambda: not _cmdline(pid), "the orphaned Python worker to exit")

    summary = run.submit().result(timeout=300)  # the retry
    account, twice = run.finish(summary, offset)
    fault_result(
        "the first run failed (spark-submit left no result); its executors exited without their driver; "
        f"the retry resumed partition 0 at the committed offset {CHUNK} and finished; {len(twice)} records "
        "of the killed chunk were handled again, none outside it; no copy in any tier or DLT",
        account,
    )


# ------------------------------------------------------------------------- case 22 (last: it loses a worker)
@pytest.mark.fault_case(
    "22",
    "the worker whose executor ran partition 0 SIGKILLed for good with everything it started, in the "
    "partition's 2nd chunk (offset 70, chunk 50-99 not committed); Spark standalone, 2 workers x 1 core",
)
def test_a_worker_lost_for_good_mid_partition_loses_nothing(
    spark_cluster, kafka_bootstrap, tmp_path, fault_result
):
    run = ClusterRun(spark_cluster, kafka_bootstrap, tmp_path)
    future = run.submit()
    pid, offset = run.stopped_at()
    executor_dir = Path(os.readlink(f"/proc/{ancestor(pid, b'CoarseGrainedExecutorBackend')}/cwd"))
    lost = _worker_of(spark_cluster, executor_dir)
    run.wait_partition_1_done()
    spark_cluster.workers[lost].kill()  # its process group: the worker JVM, its executor, the Python workers
    summary = future.result(timeout=300)

    assert retried_on(spark_cluster, executor_dir.parent.name) == [1 - lost], "\n".join(run.output[-40:])
    account, twice = run.finish(summary, offset)
    fault_result(
        "Spark lost the executor with its worker and ran partition 0's task again on the surviving worker; "
        f"it resumed at the committed offset {CHUNK} and the run finished; {len(twice)} records of the "
        "killed chunk were handled again, none outside it; no copy in any tier or DLT",
        account,
    )
