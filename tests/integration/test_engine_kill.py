"""SIGKILL an idempotent drain of each tier at several times, run again: nothing is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
KILL_AFTER_S = (0.9, 1.6)  # after process start-up, while records are being handled


def _drain(bootstrap: str, topology_file: Path, tier: int, env: dict, extra: list[str]) -> subprocess.Popen:
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
            "--bootstrap",
            bootstrap,
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )


def _kill_and_rerun_every_tier(bootstrap: str, tmp_path: Path, *, transactional: bool):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_topology(ledger.make_topology("kill"), topology_file)
    inputs = ledger.produce_inputs(bootstrap, topology, 600, PARTITIONS)
    env = {
        **os.environ,
        "AKR_LEDGER": ledger_file,
        "AKR_SLOW_S": "0.03",
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    extra = [] if transactional else ["--no-transactions"]
    kills = 0
    for tier in topology.tiers:
        for delay in KILL_AFTER_S:
            proc = _drain(bootstrap, topology_file, tier.index, env, extra)
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.communicate(timeout=60)
        proc = _drain(bootstrap, topology_file, tier.index, env, extra)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-3000:]
    assert kills >= 4, "the runs finished before they could be killed; slow the handler down"
    return topology, inputs, ledger_file


def test_killed_idempotent_runs_lose_nothing(kafka_bootstrap, tmp_path):
    """Idempotent runs (``--no-transactions``) of every tier SIGKILLed while records are being handled.

    The transactional kind is killed so elsewhere, through the same CLI drain: while records are being
    handled in ``test_engine_processes.py`` (``test_killing_the_engine_leaves_no_worker_and_loses_nothing``,
    then every tier run again), on the main and the last retry tier in ``tests/faults/test_ordering_kill.py``,
    and at the routing protocol's exact points in ``test_engine_kill_points.py``.
    """
    topology, inputs, ledger_file = _kill_and_rerun_every_tier(kafka_bootstrap, tmp_path, transactional=False)
    # copies are possible by design (at-least-once). Every record has exactly one kind of home; a handler may
    # run twice for a record (handling is at least once).
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=True,
        handled_once=False,
    )
