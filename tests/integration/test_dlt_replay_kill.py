"""A replay SIGKILLed half way and rerun with the same replay id finishes the job, moving each record once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from airflow_kafka_retry.dlt.inspect import inspect_dlt
from airflow_kafka_retry.engine.logs.replay_log import log_topic

from tests.integration.test_dlt_replay import fill_dlt, replayed_copies
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
CHUNK = 4
# mid-way through chunk 3 / chunk 3 logged, not committed / right after chunk 2 committed
KILL_ON = {"produced": 10, "logged": 3, "committed": 2}


def _replay(bootstrap: str, topology_file: Path, module: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            *module,
            "dlt",
            "replay",
            "--topology",
            str(topology_file),
            "--replay-id",
            "kill-1",
            "--transform",
            "tests.support.dlt_transforms:fix",
            "--chunk-size",
            str(CHUNK),
            "--bootstrap",
            bootstrap,
        ],
        check=False,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _kill_and_rerun(bootstrap: str, tmp_path: Path, kill_at: str, *, isolation: bool):
    topology, inputs, _, _ = fill_dlt(bootstrap, tmp_path, f"kill-{kill_at}")
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(topology, topology_file)
    dlt_keys = sorted(m.key().decode() for m in ledger.read_all(bootstrap, topology.dlt_topic))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AKR_KILL_AT": kill_at,
        "AKR_KILL_ON": str(KILL_ON[kill_at]),
    }
    killed = _replay(bootstrap, topology_file, ["tests.support.replay_kill"], env)
    assert killed.returncode == -9, killed.stderr[-3000:]
    logged = [
        m for m in ledger.read_all(bootstrap, log_topic(topology.dlt_topic)) if m.key().startswith(b"record/")
    ]
    assert len(logged) == 2 * CHUNK, f"the kill did not land after two committed chunks: {len(logged)} logged"
    [unfinished] = inspect_dlt(topology, {"bootstrap.servers": bootstrap})["replays"]
    assert (unfinished["replay_id"], unfinished["moved"], unfinished["finished"]) == (
        "kill-1",
        2 * CHUNK,
        False,
    )

    rerun = _replay(
        bootstrap, topology_file, ["airflow_kafka_retry.cli"], {**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout)
    assert summary["resumed"]
    assert summary["replay_id"] == "kill-1"
    # once the rerun has aborted the killed run's open transaction, a broker without abort isolation
    # shows its log entries (at "logged") as if committed: with their copies, also visible
    before = (2 * CHUNK, 3 * CHUNK) if kill_at == "logged" and not isolation else (2 * CHUNK,)
    assert summary["moved_before"] in before
    assert summary["moved_before"] + summary["moved"] == len(dlt_keys)
    # the log names every DLT record once, all moved by this replay id
    entries = {}
    for message in ledger.read_all(bootstrap, log_topic(topology.dlt_topic)):
        if message.key().startswith(b"record/"):
            entries[message.key()] = json.loads(message.value())
    assert len(entries) == len(dlt_keys)
    assert {e["replay_id"] for e in entries.values()} == {"kill-1"}
    [finished] = inspect_dlt(topology, {"bootstrap.servers": bootstrap})["replays"]
    assert (finished["moved"], finished["finished"]) == (len(dlt_keys), True)
    copies = Counter(m.key().decode() for m in replayed_copies(bootstrap, topology.topic))
    assert sorted(copies) == dlt_keys, "a selected record was lost"
    # at most the copies of the transaction the kill left open show twice (a broker without abort isolation)
    assert sum(copies.values()) - len(copies) <= CHUNK, copies
    return copies


@pytest.mark.parametrize("kill_at", ["produced", "logged", "committed"])
def test_killed_replay_rerun_with_the_same_id_loses_nothing(
    kafka_bootstrap, tmp_path, broker_capabilities, kill_at
):
    # copies are written and acknowledged before their log entries: where a broker shows the records of
    # an aborted transaction, a visible log entry still always has its visible copy, so nothing is lost
    copies = _kill_and_rerun(
        kafka_bootstrap, tmp_path, kill_at, isolation=broker_capabilities.abort_isolation
    )
    # the rerun's init_transactions aborted the killed run's open transaction: each record moved once
    # (a broker showing aborted records may show a copy; at "committed" no transaction was open)
    if kill_at == "committed" or broker_capabilities.abort_isolation:
        assert set(copies.values()) == {1}, f"records moved twice: {[k for k, n in copies.items() if n > 1]}"
