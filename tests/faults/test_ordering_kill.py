"""Issue 50's order target under SIGKILL: a key-ordered ledger keeps its order when a drain dies mid-chunk.

A ledger of 1,600 records over 160 keys (``testkit/ordering_ledger.py``: per-key sequence numbers, about
10 % failing once or twice, 1 % never succeeding), 2 partitions, ``ordering: key``, attempts 3, delays 0.
The tiers before the killed one run once; then the killed tier runs through ``tests/support/kill_at.py``
(the real CLI, one partition after the other) and SIGKILLs itself at partition 0's 2nd chunk, after the
chunk's routed records (held copies, marks) reached the broker inside the open transaction, before the
commit. Then every tier runs in passes until the ledger is settled: per key, the handled sequence is the
produced one minus the dead-lettered records, in order (a record the killed process handled in its open
chunk is handled again, once); the DLT holds exactly the dead records, once each; no retry tier holds a
record twice (``read_committed``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic
from testkit import ordering_ledger as ol

from tests.support import ledger

REPO = Path(__file__).parents[2]
PARTITIONS = 2
RECORDS, KEYS, SEED = 1_600, 160, 51
#: Chunk sizes: the main topic's 800 records a partition in 8 chunks (a keeper's chunk reads its hold
#: partition too), a retry tier's in chunks of 10 (about 30 records a partition reach the 2nd retry tier):
#: each tier has a 2nd chunk of partition 0.
MAIN_CHUNK, TIER_CHUNK = 100, 10


def _topology_file(path: Path):
    topic = unique_topic("ordkill")
    path.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
                "group_id": f"{topic}-svc",
                "attempts": 3,
                "backoff": {"kind": "fixed", "delay": "0ms"},
                "ordering": "key",
            }
        )
    )
    return load_topology(path)


def _killed_drain(bootstrap: str, topology_file: Path, tier: int, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tests.support.kill_at", "drain", "--topology", str(topology_file)]
    command += ["--tier", str(tier), "--handler", ol.HANDLER, "--batch-size", "5"]
    chunk = MAIN_CHUNK if tier == 0 else TIER_CHUNK
    command += ["--chunk-size", str(chunk), "--bootstrap", bootstrap, "--parallelism", "1"]
    return subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.mark.slow
@pytest.mark.parametrize("killed", [0, 1, 2], ids=["main", "retry-1", "retry-2"])
def test_a_drain_killed_mid_chunk_keeps_every_keys_order(kafka_bootstrap, tmp_path, monkeypatch, killed):
    path = str(tmp_path / "order-ledger.txt")
    monkeypatch.setenv(ol.LEDGER_ENV, path)
    monkeypatch.setenv(ol.SEED_ENV, str(SEED))
    topology_file = tmp_path / "topology.yaml"
    topology = _topology_file(topology_file)
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS)
    plan = ol.plan(RECORDS, KEYS, SEED)
    ol.produce(kafka_bootstrap, topology.topic, plan.records)
    options = {
        t.index: DrainOptions(
            handler=ol.HANDLER, batch_size=5, chunk_size=TIER_CHUNK if t.index else MAIN_CHUNK
        )
        for t in topology.tiers
    }

    def run(tier):
        return run_local(topology, tier, config, options[tier.index], in_process=True)

    for tier in topology.tiers[:killed]:  # the killed tier has records to drain
        assert run(tier).ok
    kill_log = tmp_path / "kills.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "AKR_KILL_LOG": str(kill_log)}
    env.update(AKR_KILL_AT="routed", AKR_KILL_ON="2")
    done = _killed_drain(kafka_bootstrap, topology_file, killed, env)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    tier_topic = topology.tiers[killed].topic
    assert kill_log.read_text().startswith(f"routed {tier_topic}[0] "), kill_log.read_text()
    entries = ol.read_ledger(path)
    killed_pids = {e.pid for e in entries} - {os.getpid()}
    assert killed_pids, "the killed drain handled nothing"

    passes, _ = ol.settle(topology.tiers, run, plan, path)

    report = ol.check_order(plan, ol.read_ledger(path), killed_pids=killed_pids)
    assert report.holds, f"seed {SEED}, {tier_topic} killed, {passes} passes after: " + "; ".join(
        report.problems
    )
    assert report.handled == RECORDS - len(plan.dead())
    assert topology.dlt_topic
    dlt = Counter(ol.parse(m.value())[:2] for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic))
    assert set(dlt) == plan.dead(), sorted(set(dlt) ^ plan.dead())[:5]
    assert max(dlt.values()) == 1, "a record dead-lettered twice"
    for tier in topology.retry_tiers:
        copies = Counter(ol.parse(m.value())[:2] for m in ledger.read_all(kafka_bootstrap, tier.topic))
        assert not [r for r, n in copies.items() if n > 1], f"a record twice in {tier.topic}"
