"""The benchmark's verdict says only what its own measurements show (targets, cores, load, what bounds the
rate, what transactions and worker processes change), never a fixed description of one machine or broker."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.report import TARGET_HEADERLESS_VS_RAW, TARGET_VS_RAW_HEADERS, case_rows, targets, verdict


def _case(
    records_per_s: float,
    *,
    cpu_us: float = 5.0,
    rss: float = 100.0,
    broker_s: float | None = None,
    records: int = 1_000_000,
) -> dict[str, Any]:
    wall = records / records_per_s
    result = {
        "records": records,
        "wall_s": wall,
        "cpu_s": cpu_us * records / 1e6,
        "peak_rss_mb": rss,
        "parallelism": 3,
    }
    if broker_s is not None:
        result["broker_cpu_s"] = broker_s
    return result


SPRING = {
    "raw": _case(150_000, cpu_us=2.8),
    "raw_headers": _case(120_000, cpu_us=5.3),
    "provider": _case(90_000, cpu_us=4.7),
    "local_txn": _case(100_000, cpu_us=8.0, rss=220, broker_s=4.0),
    "local_no_txn": _case(125_000, cpu_us=8.1),
    "local_threads": _case(80_000, cpu_us=8.0),
}
HEADERLESS = {"raw": _case(200_000), "local_txn": _case(180_000)}
SWEEP = [{"records": 100_000, "peak_rss_mb": 180.0}, {"records": 3_000_000, "peak_rss_mb": 210.0}]
PROFILE = {
    "phases": {"read": {"wall_s": 3.0, "thread_cpu_s": 1.0}, "job": {"wall_s": 9.0, "thread_cpu_s": 3.0}},
    "top_functions": [{"function": "~:0(<method 'headers'>)", "own_s": 0.7, "calls": 10}],
}


def _verdict(spring: dict[str, Any] | None = None, *, cores: int = 2, load: float = 0.1) -> dict[str, Any]:
    cases = copy.deepcopy(spring or SPRING)
    return verdict(
        case_rows(cases),
        case_rows(copy.deepcopy(HEADERLESS)),
        SWEEP,
        PROFILE,
        cases,
        {"cores": cores, "load_average": [load, load, load]},
    )


def test_targets_are_the_measured_ratios():
    found = {t["target"]: t for t in targets(case_rows(SPRING), case_rows(HEADERLESS), SWEEP)}
    vs_headers = found["Spring headers: drain defaults / raw loop + headers()"]
    assert vs_headers["measured"] == pytest.approx(100_000 / 120_000, abs=1e-3)
    assert vs_headers["bound"] == TARGET_VS_RAW_HEADERS
    assert vs_headers["met"] is False
    assert found["Spring headers: drain defaults ahead of the Kafka provider's operator"]["met"] is True
    assert found["Spring headers: peak RSS of the drain's process tree (MB)"]["met"] is True
    flat = next(t for t in found.values() if t["target"].startswith("memory flat"))
    assert flat["measured"] == pytest.approx(210 / 180, abs=1e-3)
    assert flat["met"] is True
    headerless = found["headerless: drain defaults / raw loop"]
    assert headerless["measured"] == pytest.approx(0.9, abs=1e-3)
    assert headerless["bound"] == TARGET_HEADERLESS_VS_RAW
    assert headerless["met"] is True


def test_a_missed_target_says_where_the_time_goes_from_this_runs_numbers():
    result = _verdict()
    assert result["met"] is False
    text = result["where_the_time_goes"]
    assert text.startswith(
        "Missed: Spring headers: drain defaults / raw loop + headers(): 0.833 (target >= 1.3)"
    )
    assert "its process tree used 8.0 s of CPU in 10.0 s and the broker 4.0 s (1.20 cores busy)" in text
    assert "Worker processes drained at 1.25x the rate of the same engine in one process" in text
    assert "Transactions (init_transactions per partition, a commit per chunk) cost 20% of the rate" in text
    assert result["broker_cpu_us_per_record_spring"] == {"local_txn": 4.0}


@pytest.mark.parametrize(
    ("cores", "load", "expected", "absent"),
    [
        (8, 0.1, "It ran on 8 core(s);", "shared"),
        (2, 3.5, "It ran on 2 core(s), shared with other work (load average 3.5 at the start);", "8 core"),
    ],
)
def test_cores_and_sharing_come_from_the_machine_record(cores, load, expected, absent):
    text = _verdict(cores=cores, load=load)["where_the_time_goes"]
    assert expected in text
    assert absent not in text


def test_what_bounds_the_rate_comes_from_cpu_against_wall_time():
    assert (
        "the cores, not the GIL or the broker's answers, bound its rate"
        in _verdict(cores=1)["where_the_time_goes"]
    )
    waited = _verdict(cores=8)["where_the_time_goes"]
    assert "for the rest it waited" in waited
    assert "bound its rate" not in waited


def test_processes_slower_than_threads_and_free_transactions_are_said_as_measured():
    spring = copy.deepcopy(SPRING)
    spring["local_threads"] = _case(125_000)
    spring["local_no_txn"] = _case(90_000)
    text = _verdict(spring)["where_the_time_goes"]
    assert "Worker processes drained at 0.80x the rate of the same engine in one process" in text
    assert "cost no rate here" in text
