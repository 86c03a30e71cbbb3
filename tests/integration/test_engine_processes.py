"""The local engine's worker processes on the real broker.

Partitions run in worker processes when the parallelism is above one: every record still ends in
exactly one home; a worker SIGKILLed mid-chunk fails its partition with an error naming it and the
signal, keeps what it committed, and the next run resumes there and loses nothing; SIGTERM or
SIGKILL of the engine's process leaves no worker behind; the passes of one run share its workers.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import LocalEngine, run_local
from airflow_kafka_retry.policy.headers import codec as H

from tests.support import ledger

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).parents[2]
WORKER_MODULE = "tests.support.worker_handler"
PARTITIONS = 3


def _pids(path: Path) -> dict[int, set[int]]:
    by_partition: dict[int, set[int]] = {}
    for line in path.read_text().split("\n"):
        if line.strip():
            partition, pid = (int(x) for x in line.split())
            by_partition.setdefault(partition, set()).add(pid)
    return by_partition


def test_worker_processes_give_every_record_exactly_one_home(kafka_bootstrap, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="airflow_kafka_retry.engine.local.worker_pool")
    ledger_file = ledger.ledger_path(tmp_path)
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("AKR_PIDS", str(pids))
    monkeypatch.setenv("AKR_SLOW_S", "0")
    topology = ledger.make_topology("procs")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 600, PARTITIONS)
    options = DrainOptions(
        handler=f"{WORKER_MODULE}:pid_indexed",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=20,
        chunk_size=50,
    )
    config = {"bootstrap.servers": kafka_bootstrap}

    summaries = ledger.run_tiers(
        topology, lambda tier: run_local(topology, tier, config, options, parallelism=2)
    )

    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    first = summaries[0]
    assert first.ok
    assert first.to_dict()["totals"]["drained"] == 600
    assert sorted(p.partition for p in first.partitions) == list(range(PARTITIONS))
    assert all(p.transactions >= 1 and p.committed_offset == p.last_offset + 1 for p in first.partitions)
    ran = _pids(pids)
    every = set().union(*ran.values())
    assert os.getpid() not in every, "a partition ran in the test's own process"
    assert len(every) >= 2, f"one process ran every partition: {ran}"
    # each run reports its workers' memory: the peak RSS of every worker process, summed
    reports = [r.getMessage() for r in caplog.records if "worker process(es), peak RSS" in r.getMessage()]
    assert len(reports) == len(topology.tiers), reports


def _worker_fault(kafka_bootstrap, tmp_path, monkeypatch, handler: str, prefix: str, count: int):
    """Inputs on 3 partitions, and a run whose worker hits ``handler``'s fault at partition 1, offset 73."""
    ledger_file = ledger.ledger_path(tmp_path)
    monkeypatch.setenv("AKR_DIE_PARTITION", "1")
    monkeypatch.setenv("AKR_DIE_OFFSET", "73")  # inside the second chunk of 50
    monkeypatch.setenv("AKR_DIE_MARK", str(tmp_path / "hit"))
    topology = ledger.make_topology(prefix)
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, count, PARTITIONS)
    options = DrainOptions(
        handler=f"{WORKER_MODULE}:{handler}",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=10,
        chunk_size=50,
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    summary = run_local(topology, topology.tier(0), config, options, parallelism=2)
    assert (tmp_path / "hit").exists()
    return topology, inputs, ledger_file, options, config, summary


def test_a_silent_worker_is_killed_by_the_engine_and_the_run_ends(
    kafka_bootstrap, tmp_path, monkeypatch, broker_capabilities
):
    """A worker wedged inside a chunk (SIGSTOPped: no heartbeat) is killed once silent for the limit; the
    run ends, its partition failed naming why, and the next run resumes at the committed offset."""
    from airflow_kafka_retry.engine.local import worker_pool as process_pool

    monkeypatch.setattr(process_pool, "WORKER_SILENCE_S", 4.0)
    topology, inputs, ledger_file, options, config, summary = _worker_fault(
        kafka_bootstrap, tmp_path, monkeypatch, "freezes_once", "procsilent", 300
    )
    silent = {p.partition: p for p in summary.partitions}[1]
    assert silent.status == "failed"
    assert "killed by the engine after" in silent.error, silent.error
    assert "without a word from it" in silent.error, silent.error
    assert silent.committed_offset == 50, silent
    for tier in topology.tiers:
        assert run_local(topology, tier, config, options, parallelism=2).ok
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=not broker_capabilities.abort_isolation,
        handled_once=False,
    )


def test_a_worker_killed_mid_chunk_fails_its_partition_and_the_next_run_loses_nothing(
    kafka_bootstrap, tmp_path, monkeypatch, broker_capabilities
):
    topology, inputs, ledger_file, options, config, summary = _worker_fault(
        kafka_bootstrap, tmp_path, monkeypatch, "dies_once", "procdie", 450
    )
    tier0 = topology.tier(0)

    assert not summary.ok
    by_partition = {p.partition: p for p in summary.partitions}
    assert sorted(by_partition) == list(range(PARTITIONS)), "a partition is missing from the run summary"
    dead = by_partition[1]
    assert dead.status == "failed"
    assert "WorkerDiedError" in dead.error, dead.error
    assert f"{tier0.topic}[1]" in dead.error, dead.error
    assert "signal 9 (SIGKILL)" in dead.error, dead.error
    # what the worker committed before it died is in its summary and on the broker, and nothing after
    assert dead.committed_offset == 50, dead
    assert dead.drained == 50, dead
    committed = ledger.committed(kafka_bootstrap, topology.consumer_group(tier0), topology.topic, PARTITIONS)
    assert committed[1] == 50
    for number in (0, 2):
        assert by_partition[number].status == "ok", by_partition[number]
        assert committed[number] == by_partition[number].committed_offset == 150

    # the next runs resume partition 1 at offset 50; every record ends in one home (the chunk the
    # worker died in was handled twice; its transaction was aborted, so its routed records show once,
    # except on a broker showing aborted records)
    again = run_local(topology, tier0, config, options, parallelism=2)
    assert again.ok
    assert {p.partition: p.start_offset for p in again.partitions}[1] == 50
    for tier in topology.tiers[1:]:
        assert run_local(topology, tier, config, options, parallelism=2).ok
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=not broker_capabilities.abort_isolation,
        handled_once=False,
    )


def _drain(bootstrap: str, topology_file: Path, env: dict[str, str], tier: int = 0) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "drain",
            "--topology",
            str(topology_file),
            "--tier",
            str(tier),
            "--handler",
            f"{ledger.HANDLER_MODULE}:slow_indexed",
            "--value-deserializer",
            f"{ledger.HANDLER_MODULE}:decode",
            "--batch-size",
            "10",
            "--chunk-size",
            "40",
            "--parallelism",
            "2",
            "--bootstrap",
            bootstrap,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )


def _workers_of(proc: subprocess.Popen, count: int) -> list[psutil.Process]:
    """The engine's worker processes once ``count`` of them run (waits for the engine to start them)."""
    for _ in range(600):
        workers = [
            c
            for c in psutil.Process(proc.pid).children()
            if "airflow_kafka_retry.engine.local.worker" in " ".join(c.cmdline())
        ]
        if len(workers) >= count:
            return workers
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        time.sleep(0.1)
    raise AssertionError("the engine did not start its worker processes")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_engine_leaves_no_worker_and_loses_nothing(
    kafka_bootstrap, tmp_path, broker_capabilities, sig
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_topology(ledger.make_topology("procorphan"), topology_file)
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 400, 2)
    env = {**os.environ, "AKR_LEDGER": ledger_file, "AKR_SLOW_S": "0.05", "PYTHONPATH": str(REPO)}
    proc = _drain(kafka_bootstrap, topology_file, env)
    workers = _workers_of(proc, 2)
    while not ledger.processed_ids(ledger_file):  # records are being handled
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        time.sleep(0.05)

    proc.send_signal(sig)
    proc.communicate(timeout=60)

    gone, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, f"worker processes outlived the engine: {[w.pid for w in alive]}"
    for tier in topology.tiers:
        rerun = _drain(kafka_bootstrap, topology_file, {**env, "AKR_SLOW_S": "0"}, tier.index)
        _, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err.decode()[-3000:]
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        2,
        allow_duplicates=not broker_capabilities.abort_isolation,
        handled_once=False,
    )


def test_passes_of_one_run_share_its_worker_processes_each_at_its_own_cutoff(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """A run's workers start before its first pass (while an event-mode run waits for its wave) and serve
    every pass: records due by a pass's cutoff are drained by it, the later ones by the pass whose cutoff
    reaches them, each exactly once, and no worker is started twice or outlives the run."""
    pids_file = tmp_path / "pids.txt"
    monkeypatch.setenv("AKR_PIDS", str(pids_file))
    topology = ledger.make_topology("passes")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=2)
    tier = topology.tier(1)
    now = int(time.time() * 1000)
    early, late = now - 1_000, now + 60_000  # the late half is due long after the workers' setup
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(40):
        due = early if i < 20 else late
        headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due))]
        producer.produce(tier.topic, value=b"{}", key=str(i).encode(), partition=i % 2, headers=headers)
    assert producer.flush(30) == 0
    options = DrainOptions(handler="tests.support.worker_handler:pid_noted")

    with LocalEngine(topology, tier, config, options, parallelism=2) as engine:
        assert engine.pool is not None, "two partitions on two cores run in worker processes"
        started = list(engine.pool.pids)
        assert len(started) == 2
        first = engine.drain(early)
        again = engine.drain(early)
        last = engine.drain(late)  # a cutoff past every record: the workers must take it from the pass
        assert engine.pool.pids == started, "a pass started workers of its own"
    handled = [tuple(int(x) for x in line.split()) for line in pids_file.read_text().splitlines()]
    drained = [s.to_dict()["totals"]["drained"] for s in (first, again, last)]
    assert drained == [20, 0, 20], drained
    assert all(s.ok for s in (first, again, last))
    assert len({(p, o) for p, o, _ in handled}) == len(handled) == 40, handled
    assert {pid for _, _, pid in handled} <= set(started), "a record was handled outside the run's workers"
    for pid in started:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
