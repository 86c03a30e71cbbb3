"""Unit tests of the view's scan cache and cap (plugin/scans.py) with stand-in scans and a fake clock."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from airflow_kafka_retry.plugin import scans
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.policy.topology.model import Topology


def scan(n: int, *, complete: bool = True) -> scans.TopologyScan:
    return scans.TopologyScan(now_ms=n, backlog={}, dead={}, complete=complete)


BUSY = scans.TopologyScan(now_ms=-1, backlog={}, dead={}, complete=False)


def busy() -> scans.TopologyScan:
    return BUSY


def test_a_read_is_reused_within_the_ttl_and_not_after():
    now = [0.0]
    cache, reads = scans.ScanCache(clock=lambda: now[0]), []

    def read() -> scans.TopologyScan:
        reads.append(1)
        return scan(len(reads))

    assert cache.get("t", 5, read, busy=busy).now_ms == 1
    now[0] = 4.9
    assert cache.get("t", 5, read, busy=busy).now_ms == 1
    assert cache.get("other", 5, read, busy=busy).now_ms == 2
    now[0] = 5.0
    assert cache.get("t", 5, read, busy=busy).now_ms == 3
    assert cache.get("t", 0, read, busy=busy).now_ms == 4, "a TTL of 0 reads every time"


def test_an_incomplete_read_is_not_cached():
    cache, reads = scans.ScanCache(clock=lambda: 0.0), []

    def read() -> scans.TopologyScan:
        reads.append(1)
        return scan(len(reads), complete=len(reads) > 1)

    assert [cache.get("t", 60, read, busy=busy).now_ms for _ in range(3)] == [1, 2, 2]


def test_a_request_arriving_while_its_topology_is_read_answers_busy_at_once():
    cache, reads, started, release = scans.ScanCache(), [], threading.Event(), threading.Event()

    def read() -> scans.TopologyScan:
        reads.append(1)
        started.set()
        release.wait(10)
        return scan(1)

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(cache.get, "t", 60, read, busy=busy)
        started.wait(10)
        others = [cache.get("t", 60, read, busy=busy) for _ in range(3)]  # while the read holds the lock
        release.set()
        assert first.result(10).now_ms == 1
    assert len(reads) == 1
    assert others == [BUSY] * 3
    assert cache.get("t", 60, read, busy=busy).now_ms == 1, "then the read is reused"


def test_a_scan_that_cannot_start_under_the_cap_is_reported_busy_and_not_cached(monkeypatch):
    settings = ViewSettings(
        topologies=(),
        kafka_conn_id="k",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=0.2,
        runs=1,
        max_scans=7,
    )
    topology = Topology.from_mapping({"topic": "orders", "group_id": "svc", "attempts": 2})

    def never(*args, **kwargs):
        raise AssertionError("a scan ran past the cap")

    monkeypatch.setattr(scans, "scan_backlog", never)
    monkeypatch.setattr(scans, "count_dead_letters", never)
    gate = scans._gate(7)
    for _ in range(7):
        gate.acquire()
    try:
        result = scans.read_topology(topology, settings, {}, now_ms=1)
    finally:
        for _ in range(7):
            gate.release()
    assert not result.complete
    busy = (
        "orders-retry-1: the view is busy (7 Kafka scans running, [kafka_retry] max_scans); "
        "refresh in a moment"
    )
    assert result.backlog["orders-retry-1"]["error"] == busy
    assert set(result.dead) == {"orders-dlt", "orders-parking"}
    assert "busy" in result.dead["orders-dlt"]["error"]
