"""SIGKILL a drain at exact points of the routing protocol, run again: nothing lost, nothing committed early.

``tests/support/kill_at.py`` runs the real CLI and kills its own process (SIGKILL, no clean-up)
either when a chunk's routed records have reached the broker but its offsets are not committed
(``routed``: inside the open transaction, or between delivery and commit without transactions),
or right after a chunk was committed (``committed``). The timing-based kills of
``test_engine_kill.py`` cover kills while records are being handled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 280  # 140 per partition: chunks of 40 -> the 2nd chunk of partition 0 is offsets 40..79
CHUNK = 40


def _drain(
    bootstrap: str,
    topology_file: Path,
    tier: int,
    env: dict,
    *,
    transactional: bool,
    module: str = "airflow_kafka_retry.cli",
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            "drain",
            "--topology",
            str(topology_file),
            "--tier",
            str(tier),
            "--handler",
            f"{ledger.HANDLER_MODULE}:indexed",
            "--value-deserializer",
            f"{ledger.HANDLER_MODULE}:decode",
            "--batch-size",
            "10",
            "--chunk-size",
            str(CHUNK),
            "--bootstrap",
            bootstrap,
            "--parallelism",
            "1",  # one partition after the other: the n-th kill point is partition 0's
            *([] if transactional else ["--no-transactions"]),
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def _kill_then_finish(bootstrap: str, tmp_path: Path, point: str, *, transactional: bool):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_topology(ledger.make_topology(f"killat-{point}"), topology_file)
    inputs = ledger.produce_inputs(bootstrap, topology, COUNT, PARTITIONS)
    kill_log = tmp_path / "kills.txt"
    env = {**os.environ, "AKR_LEDGER": ledger_file, "PYTHONPATH": str(REPO), "AKR_KILL_LOG": str(kill_log)}

    killed = _drain(
        bootstrap,
        topology_file,
        0,
        {**env, "AKR_KILL_AT": point, "AKR_KILL_ON": "2"},
        transactional=transactional,
        module="tests.support.kill_at",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    main = topology.topic
    assert kill_log.read_text() == f"{point} {main}[0] up-to={2 * CHUNK}\n"
    # what the group had committed when the process died: chunk 1 only, or chunks 1 and 2
    committed = ledger.committed(bootstrap, topology.group_id, main, PARTITIONS)
    assert committed == {0: CHUNK if point == "routed" else 2 * CHUNK, 1: -1001}, committed
    handled = sum(ledger.processed_ids(ledger_file).values())
    assert 0 < handled < COUNT, handled

    for tier in topology.tiers:  # the next runs (of every tier) finish the job
        done = _drain(bootstrap, topology_file, tier.index, env, transactional=transactional)
        assert done.returncode == 0, done.stderr[-3000:]
    return topology, inputs, ledger_file


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
@pytest.mark.parametrize("point", ["routed", "committed"])
def test_a_kill_at_a_protocol_point_loses_nothing(kafka_bootstrap, tmp_path, point, transactional):
    topology, inputs, ledger_file = _kill_then_finish(
        kafka_bootstrap, tmp_path, point, transactional=transactional
    )
    # chunk 2 of partition 0 was handled before the kill and is handled again (at least once);
    # without abort isolation (or without transactions) its routed records may show twice
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=True,
        handled_once=point == "committed",
    )


@pytest.mark.requires_capability("abort_isolation")
def test_a_kill_inside_the_transaction_duplicates_nothing(kafka_bootstrap, tmp_path):
    topology, inputs, ledger_file = _kill_then_finish(kafka_bootstrap, tmp_path, "routed", transactional=True)
    # the rerun's init_transactions aborted the dead run's open transaction: its records stay invisible
    ledger.check_ledger(
        kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, allow_duplicates=False, handled_once=False
    )
    for tier in topology.retry_tiers:
        keys = [m.key() for m in ledger.read_all(kafka_bootstrap, tier.topic)]
        assert len(keys) == len(set(keys)), f"duplicates in {tier.topic}"
