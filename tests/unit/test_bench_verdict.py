"""The benchmark's verdict says only what its own measurements show (cores, load, what bounds the rate,
the cost of transactions), never a fixed description of one machine or broker."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.report import verdict

RESULTS_FILE = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-11-23.json"
RESULTS = json.loads(RESULTS_FILE.read_text())


def _text(*, cores: int = 2, load: float = 0.1, cpu_s: float | None = None,
          txn_rate: float | None = None) -> str:
    cases: dict[str, Any] = copy.deepcopy(RESULTS["raw_results"])
    rows: list[dict[str, Any]] = copy.deepcopy(RESULTS["cases"])
    if cpu_s is not None:
        cases["local_txn"]["cpu_s"] = cpu_s
    if txn_rate is not None:
        next(r for r in rows if r["case"] == "local_txn")["records_per_s"] = txn_rate
    machine = {**RESULTS["machine"], "cores": cores, "load_average": [load, load, load]}
    result = verdict(rows, RESULTS["profile"], cases, 13, machine)
    assert result["met"] is False  # the stored run missed the target, so the verdict explains why
    return result["what_prevents_it"]


def test_the_stored_run_is_described_by_its_own_numbers() -> None:
    text = _text(load=RESULTS["machine"]["load_average"][0])
    wall, cpu = RESULTS["raw_results"]["local_txn"]["wall_s"], RESULTS["raw_results"]["local_txn"]["cpu_s"]
    assert f"It ran on 2 core(s); its process used {cpu:.1f} s of CPU in {wall:.1f} s" in text
    assert "Transactions (init_transactions per partition, a commit per chunk) cost 2% of the rate" in text
    assert "Tansu" not in text and "shared" not in text  # load average 0.45 at the start: not shared
    assert text == RESULTS["verdict"]["what_prevents_it"]  # the committed results say the same


@pytest.mark.parametrize(("cores", "load", "expected", "absent"), [
    (8, 0.1, "It ran on 8 core(s);", "shared"),
    (2, 3.5, "It ran on 2 core(s), shared with other work (load average 3.5 at the start);", "8 core"),
])
def test_cores_and_sharing_come_from_the_machine_record(cores: int, load: float, expected: str,
                                                        absent: str) -> None:
    text = _text(cores=cores, load=load)
    assert expected in text and absent not in text


def test_what_bounds_the_rate_comes_from_cpu_against_wall_time() -> None:
    wall = RESULTS["raw_results"]["local_txn"]["wall_s"]
    assert "so its own CPU, not the broker, bounds its rate" in _text(cpu_s=wall)
    waited = _text(cpu_s=wall / 4)
    assert "so for the rest it waited, on the broker or on I/O, not on its CPU" in waited
    assert "not the broker, bounds" not in waited


def test_the_cost_of_transactions_comes_from_the_two_local_cases() -> None:
    no_txn = next(r for r in RESULTS["cases"] if r["case"] == "local_no_txn")["records_per_s"]
    assert f"cost 50% of the rate here ({no_txn / 2:,.0f} rec/s with them" in _text(txn_rate=no_txn / 2)
    assert "cost no rate here" in _text(txn_rate=no_txn * 1.1)
