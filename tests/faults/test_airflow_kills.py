"""Cases 7 (Airflow half) and 8: ``ReprocessTierOperator`` through real Airflow (``airflow dags test``,
its own ``AIRFLOW_HOME`` and PostgreSQL metadata DB (a copy of a migrated template,
``tests/support/postgres_fixtures.py``), the Kafka connection from ``AIRFLOW_CONN_KAFKA_DEFAULT``).

8. The task process gets SIGTERM, and SIGKILL if it is still alive after the grace period (Airflow's
   supervisor escalates after 5 s). ``on_kill`` stops every partition at its next chunk boundary; with a
   chunk slower than the grace period, SIGKILL lands inside it, and the committed offset is still a
   chunk boundary, and the next run completes (chunks that finish within the grace period, where the task
   stops at the boundary and fails as "killed": ``test_reprocess_operator_dag.py``). Its supervisor
   killed instead, the task stops at once.
7. Two task instances of the same tier (two DAG runs in two Airflow deployments on one Kafka) at once:
   one is fenced per partition.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.faults.helpers import REPO, options, run_all_tiers
from tests.support import ledger
from tests.support.ledger import FaultInput

if TYPE_CHECKING:
    from testkit.airflow_postgres import AirflowDatabases

pytestmark = [pytest.mark.slow]

# mostly successes: the test handler pauses on every call, and each failure costs a call (the rest of its
# batch is handed over again), so chunk times stay near (calls per chunk) x AKR_SLOW_S. Every tier's chunks
# hold a record that fails again: Tansu loses the offsets of a transaction without records
# (offsets_only_transactions).
MODES = ("ok", "ok", "transient:1", "permanent", "fatal")
GRACE_S = 5.0  # the supervisor's escalation delay between SIGTERM and SIGKILL
CHUNK = 20
TASK_END = "[DAG TEST] end task task_id=reprocess"

DAG_FILE = '''
"""Written by tests/faults/test_airflow_kills.py."""
from datetime import datetime

from airflow.sdk import DAG

from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator

with DAG("akr_faults_reprocess", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    ReprocessTierOperator(task_id="reprocess", topology={topology!r}, tier=0,
                          handler="tests.support.fault_handler:indexed",
                          options={{"batch_size": 10, "chunk_size": {chunk}}}, retries=0)
'''


def _airflow() -> str:
    return str(Path(sys.executable).with_name("airflow"))


def _env(home: Path, bootstrap: str, ledger_file: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
            ),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            "AKR_LEDGER": ledger_file,
            **extra,
        }
    )
    return env


def _deployment(
    databases: AirflowDatabases, where: Path, topology_file: Path, env: dict[str, str]
) -> dict[str, str]:
    """A home with the DAG file and a fresh migrated metadata DB; returns its environment. (``dags test``
    parses and stores the DAG itself: ``DAG.test()`` syncs its bundle first, so no ``dags reserialize``.)"""
    (where / "dags").mkdir(parents=True)
    (where / "dags" / "akr_faults_reprocess.py").write_text(
        DAG_FILE.format(topology=str(topology_file), chunk=CHUNK)
    )
    return {
        **env,
        "AIRFLOW_HOME": str(where),
        "AIRFLOW__CORE__DAGS_FOLDER": str(where / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": databases.new(),
    }


def _dags_test(env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "w")  # closed with the process
    return subprocess.Popen(
        [_airflow(), "dags", "test", "akr_faults_reprocess"],
        env=env,
        cwd=REPO,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def _wait_for_commit(bootstrap: str, topology, proc: subprocess.Popen, timeout: float = 180) -> int:
    """Wait until the run committed its first chunk (so what follows happens inside a later chunk)."""
    deadline = time.monotonic() + timeout
    while (offset := ledger.committed(bootstrap, topology.group_id, topology.topic, 1)[0]) < CHUNK:
        assert proc.poll() is None, "the task finished before it could be killed"
        assert time.monotonic() < deadline, "the task never committed a chunk"
        time.sleep(0.3)
    return offset


def _setup(tmp_path: Path, bootstrap: str, prefix: str, count: int):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_fault_topology(ledger.make_fault_topology(prefix), topology_file)
    inputs = ledger.produce_fault_inputs(
        bootstrap, topology, [FaultInput(MODES[i % 5]) for i in range(count)], 1
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    return ledger_file, topology_file, topology, inputs, str(markers)


# One chunk slower than the grace period, so SIGKILL lands inside it. A SIGTERM whose chunks end within the
# grace period (on_kill stops the partition at the next boundary and the task fails as killed) is
# test_reprocess_operator_dag.py::test_sigterm_stops_the_task_at_a_chunk_boundary: the same operator in a real
# `airflow dags test`, the committed offset, routed records and ledger checked at the boundary.
@pytest.mark.parametrize(
    "slow_s",
    [
        pytest.param(
            1.5,
            marks=pytest.mark.fault_case(
                "8",
                "SIGTERM to the `airflow dags test` process running ReprocessTierOperator mid-run, with "
                f"chunks (about 7 s for {CHUNK} records) slower than the {GRACE_S:g} s grace period: SIGKILL "
                "lands inside a chunk",
            ),
        ),
    ],
    ids=["sigkill-mid-chunk"],
)
def test_a_killed_airflow_task_stops_at_a_chunk_boundary(
    kafka_bootstrap, tmp_path, airflow_databases, fault_result, slow_s
):
    ledger_file, topology_file, topology, inputs, markers = _setup(tmp_path, kafka_bootstrap, "af-kill", 200)
    env = _deployment(
        airflow_databases,
        tmp_path / "airflow",
        topology_file,
        _env(tmp_path, kafka_bootstrap, ledger_file, AKR_SLOW_S=str(slow_s), AKR_KILL_DIR=markers),
    )
    log = tmp_path / "dags-test.log"
    proc = _dags_test(env, log)
    _wait_for_commit(kafka_bootstrap, topology, proc)

    proc.send_signal(signal.SIGTERM)
    # Airflow's supervisor SIGKILLs the task process when it has not exited GRACE_S after SIGTERM; a task
    # process exits as soon as its task ended. Here the task runs inside `airflow dags test`, which goes on
    # to finish the DAG run, so the task's end is read from its log.
    deadline = time.monotonic() + GRACE_S
    while (
        time.monotonic() < deadline
        and TASK_END not in log.read_text(errors="replace")
        and proc.poll() is None
    ):
        time.sleep(0.05)
    killed = TASK_END not in log.read_text(errors="replace")
    if killed:
        proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    output = log.read_text(errors="replace")
    assert "kill requested: stopping every partition at its next chunk boundary" in output, output[-3000:]
    committed = ledger.committed(kafka_bootstrap, topology.group_id, topology.topic, 1)[0]
    assert committed > 0, committed
    assert committed % CHUNK == 0, committed
    assert committed < 200, committed
    assert killed, "the task ended within the grace period: its chunk was not slower than it"
    did = "on_kill asked for a stop; the chunk in progress outlasted the grace period and SIGKILL ended it"

    run_all_tiers(topology, {"bootstrap.servers": kafka_bootstrap}, options(chunk_size=CHUNK))
    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, 1, handled_once=False)
    fault_result(f"{did}; committed offset {committed} (a chunk boundary); the next runs completed", account)


#: A stand-in for Airflow's task supervisor: the parent of the task process (here `airflow dags test`).
SUPERVISOR = "import subprocess, sys; sys.exit(subprocess.Popen(sys.argv[1:]).wait())"


@pytest.mark.fault_case(
    "8",
    "the parent (supervisor) of the `airflow dags test` process running ReprocessTierOperator SIGKILLed "
    "mid-run; the task process lives on, as when a scheduler is killed with its LocalExecutor",
)
def test_a_task_whose_supervisor_dies_stops_at_a_chunk_boundary(
    kafka_bootstrap, tmp_path, airflow_databases, fault_result
):
    ledger_file, topology_file, topology, inputs, markers = _setup(
        tmp_path, kafka_bootstrap, "af-orphan", 200
    )
    env = _deployment(
        airflow_databases,
        tmp_path / "airflow",
        topology_file,
        # chunks of about 1.5 s: the whole partition takes about 15 s, so a task that went on would finish it
        _env(tmp_path, kafka_bootstrap, ledger_file, AKR_SLOW_S="0.3", AKR_KILL_DIR=markers),
    )
    log = tmp_path / "dags-test.log"
    with open(log, "w") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, _airflow(), "dags", "test", "akr_faults_reprocess"],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_commit(kafka_bootstrap, topology, supervisor)
        [task] = psutil.Process(supervisor.pid).children()
        supervisor.kill()
        supervisor.wait(10)
        # the orphaned task stops at once, aborting its chunk in progress, and ends on its own
        _, alive = psutil.wait_procs([task], timeout=120)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    for proc in alive:
        proc.kill()
    assert not alive, "the task went on after its supervisor died"
    output = log.read_text(errors="replace")
    gone = f"the task's supervisor (pid {supervisor.pid}) is gone: stopping every partition at once"
    assert gone in output, output[-3000:]
    committed = ledger.committed(kafka_bootstrap, topology.group_id, topology.topic, 1)[0]
    assert committed % CHUNK == 0, committed
    assert CHUNK <= committed < 200, committed

    run_all_tiers(topology, {"bootstrap.servers": kafka_bootstrap}, options(chunk_size=CHUNK))
    # records of the aborted chunk the orphan had handled are handled again by the next run (at least once)
    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, 1, handled_once=False)
    fault_result(
        f"the task saw its parent gone and stopped the partition at once, its chunk in progress aborted; "
        f"committed offset {committed} (a chunk boundary); the next runs completed",
        account,
    )


@pytest.mark.fault_case(
    "7",
    "two task instances of ReprocessTierOperator for the same tier at once (two `airflow "
    "dags test` runs, two deployments, one Kafka), started together",
)
def test_two_airflow_task_instances_of_one_tier_one_is_fenced(
    kafka_bootstrap, tmp_path, airflow_databases, broker_capabilities, fault_result
):
    ledger_file, topology_file, topology, inputs, markers = _setup(tmp_path, kafka_bootstrap, "af-twice", 80)
    base = _env(tmp_path, kafka_bootstrap, ledger_file, AKR_SLOW_S="0.3", AKR_KILL_DIR=markers)
    envs = [_deployment(airflow_databases, tmp_path / f"airflow-{n}", topology_file, base) for n in "ab"]
    logs = [tmp_path / f"dags-test-{n}.log" for n in "ab"]

    # started together: each spends about 10 s starting Airflow, then drains for about 20 s, so whichever
    # initialises the partition's transactions second fences the other
    first = _dags_test(envs[0], logs[0])
    second = _dags_test(envs[1], logs[1])
    for proc in (first, second):
        proc.wait(300)
    outputs = [log.read_text(errors="replace") for log in logs]
    fenced = [n for n, out in zip("AB", outputs) if "fenced by a newer run of the same partition" in out]
    assert fenced, "the two task instances never met on the partition"
    assert len(fenced) == 1, "both were fenced"

    run_all_tiers(topology, {"bootstrap.servers": kafka_bootstrap}, options(chunk_size=CHUNK))
    # the fenced instance's routed records were aborted: no copies, unless the broker shows them (Tansu)
    account = ledger.account(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        1,
        allow_duplicates=not broker_capabilities.abort_isolation,
        handled_once=False,
    )
    fault_result(
        f"task instance {fenced[0]} (of A, B) was fenced (its partition failed with FencedError, nothing of "
        "its "
        "chunk committed); the other finished",
        account,
    )
