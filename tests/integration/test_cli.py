"""The CLI through real processes: ``broker`` prints a working address; ``drain`` prints the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support import ledger

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).parents[2]


def test_broker_command_prints_a_working_bootstrap_address():
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_kafka_retry.cli", "broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        bootstrap = proc.stdout.readline().strip()
        assert bootstrap.startswith("127.0.0.1:"), bootstrap
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        assert metadata.brokers
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_drain_prints_the_run_summary_as_json(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_topology(ledger.make_topology("cli"), topology_file)
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 70, 2)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "drain",
            "--topology",
            str(topology_file),
            "--tier",
            "0",
            "--handler",
            f"{ledger.HANDLER_MODULE}:indexed",
            "--value-deserializer",
            f"{ledger.HANDLER_MODULE}:decode",
            "--bootstrap",
            kafka_bootstrap,
        ],
        check=False,
        env={**os.environ, "AKR_LEDGER": ledger_file, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "ok"
    assert summary["engine"] == "local"
    assert summary["tier"] == 0
    totals = summary["totals"]
    assert totals["drained"] == 70
    fates = [mode for mode, _, _ in inputs.records.values()]
    assert totals["succeeded"] == fates.count("ok")
    assert totals["routed"][topology.tier(1).topic] == sum(
        fates.count(m) for m in ("transient:1", "transient:2", "permanent")
    )
    assert totals["dead_lettered"] == {
        f"{ledger.HANDLER_MODULE}.InvalidOrder": fates.count("fatal"),
        "airflow_kafka_retry.errors.DeserializationError": fates.count("bad-json"),
    }
    partitions = {p["partition"]: p for p in summary["partitions"]}
    assert {p: partitions[p]["committed_offset"] for p in partitions} == {0: 35, 1: 35}
    letters = [d for p in summary["partitions"] for d in p["dead_letters"]]
    assert len(letters) == fates.count("fatal") + fates.count("bad-json")
    assert all(d["dlt_topic"] == topology.dlt_topic and d["dlt_offset"] is not None for d in letters)
    assert '"mode"' not in result.stdout, "record payloads leaked into the summary"
