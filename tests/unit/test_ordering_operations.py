"""
Operating ``ordering: key`` without a broker: the release command's parsing, the state read's per-partition
figures (never a key), the view's blocked-keys card and its scan under the cap.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kafka_retry.cli import build_parser
from airflow_kafka_retry.engine.scans.order_state import OrderState, PartitionOrder
from airflow_kafka_retry.observability.metrics import ordering_gauges
from airflow_kafka_retry.ordering.release import ReleaseError, key_bytes, operator_name, release_key
from airflow_kafka_retry.plugin import scans
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.plugin.view_model import topology_view
from airflow_kafka_retry.policy.ordering.entries import BlockedKey, Held, Location, key_id
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.triggers.topology_lanes import check_lanes

ORDERED = {"topic": "orders", "group_id": "svc", "attempts": 2, "ordering": "key"}


class Record:
    """A stand-in for a state record read from Kafka."""

    def __init__(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset


def test_release_parses_a_key_by_text_or_hex_and_needs_exactly_one():
    args = build_parser().parse_args(
        [
            "ordering",
            "release",
            "--topology",
            "t.yaml",
            "--key-hex",
            "00ff",
            "--partition",
            "2",
            "--by",
            "ann",
        ]
    )
    assert (args.key, args.key_hex, args.partition, args.by, args.reason) == (None, "00ff", 2, "ann", None)
    assert key_bytes(None, args.key_hex) == b"\x00\xff"
    assert key_bytes(None, "0x0a") == b"\n"
    assert key_bytes("acct-42", None) == b"acct-42"
    assert key_bytes("é", None) == "é".encode()
    with pytest.raises(ReleaseError, match="--key-hex 'zz' is not hex"):
        key_bytes(None, "zz")
    with pytest.raises(ReleaseError, match="exactly one of --key"):
        key_bytes("a", "00")
    with pytest.raises(SystemExit):  # argparse: one of them is required, not both
        build_parser().parse_args(["ordering", "release", "--topology", "t", "--key", "a", "--key-hex", "00"])
    assert operator_name("ann") == "ann"
    assert operator_name(None)  # the OS user
    with pytest.raises(ReleaseError, match="--by must name someone"):
        operator_name(" ")


def test_release_refuses_a_topology_without_key_order_before_any_broker_call():
    plain = Topology.from_mapping({"topic": "orders", "group_id": "svc", "attempts": 2})
    with pytest.raises(ReleaseError, match="ordering is 'none', so no key is ever held"):
        release_key(plain, {}, b"k", by="ann")
    with pytest.raises(ReleaseError, match="--reason is 1001 characters"):
        release_key(Topology.from_mapping(ORDERED), {}, b"k", by="ann", reason="x" * 1001)


def test_the_state_read_keeps_the_last_entry_of_each_key_and_names_bad_ones():
    a, b = key_id(b"a"), key_id(b"b")
    assert a is not None
    assert b is not None
    part = PartitionOrder(1)
    old = BlockedKey(Location("orders-retry-1", 1, 5), (Held(0, 10, 1),), since_ms=1_000, head_main_offset=9)
    part.add(
        Record(a, BlockedKey(Location("orders", 1, 9), since_ms=1_000).to_bytes(), 0), "orders-order-state"
    )
    part.add(Record(a, old.to_bytes(), 1), "orders-order-state")
    part.add(Record(b, BlockedKey(Location("orders-dlt", 1, 0), since_ms=2_000).to_bytes(), 2), "s")
    part.add(Record(b, None, 3), "s")  # freed
    part.add(Record(b"short", b"{}", 4), "orders-order-state")
    part.add(Record(b, b'{"v":2}', 5), "orders-order-state")
    assert part.entries == {a: old}
    assert part.bad_entries == 2
    assert part.bad[1] == "orders-order-state[1]@5: the state entry is not a version-1 object"
    state = OrderState("orders-order-state", now_ms=61_000, partitions=[PartitionOrder(0), part])
    assert state.find(a) == (1, old)
    assert state.find(b) is None
    shown = state.to_dict()
    assert shown["totals"] == {
        "blocked_keys": 1,
        "held_records": 1,
        "oldest": {
            "since_ms": 1_000,
            "age_s": 60.0,
            "head": "orders-retry-1[1]@5",
            "head_main_offset": 9,
            "held": 1,
            "in_dlt": False,
        },
        "bad_entries": 2,
    }
    assert shown["partitions"][0] == {
        "partition": 0,
        "blocked_keys": 0,
        "held_records": 0,
        "oldest": None,
        "bad_entries": 0,
        "bad": [],
    }
    assert a.hex() not in json.dumps(shown)


def _settings(**more: Any) -> ViewSettings:
    return ViewSettings(
        topologies=(),
        kafka_conn_id="k",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=0.2,
        runs=1,
        **more,
    )


def test_the_view_reads_the_blocked_keys_of_a_topology_with_key_order_only(monkeypatch):
    asked: list[tuple[str, int]] = []

    def state(config: Any, topic: str, *, timeout_s: float, now_ms: int) -> OrderState:
        asked.append((topic, now_ms))
        return OrderState(topic, now_ms=now_ms, partitions=[PartitionOrder(0)])

    class Empty:
        def to_dict(self) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(scans, "scan_backlog", lambda *a, **k: Empty())
    monkeypatch.setattr(scans, "count_dead_letters", lambda *a, **k: Empty())
    monkeypatch.setattr(scans, "read_order_state", state)
    ordered = Topology.from_mapping(ORDERED)
    scan = scans.read_topology(ordered, _settings(), {}, now_ms=7)
    assert asked == [("orders-order-state", 7)]
    assert scan.blocked is not None
    assert scan.blocked["totals"]["blocked_keys"] == 0
    view = topology_view("o.yaml", ordered, _settings(), scan, runs_reader=lambda *a: [], can_trigger=bool)
    assert view["ordering"] == "key"
    assert view["blocked_keys"] == scan.blocked
    busy = scans.busy_scan(ordered, now_ms=1).blocked
    assert busy is not None
    assert busy["error"].startswith("orders-order-state: busy")

    plain = Topology.from_mapping({"topic": "orders", "group_id": "svc", "attempts": 2})
    scan = scans.read_topology(plain, _settings(), {}, now_ms=7)
    assert scan.blocked is None
    assert len(asked) == 1
    view = topology_view("o.yaml", plain, _settings(), scan, runs_reader=lambda *a: [], can_trigger=bool)
    assert view["blocked_keys"] is None
    assert scans.busy_scan(plain, now_ms=1).blocked is None


def test_the_key_order_gauges_per_partition_zeros_included():
    a, b = key_id(b"a"), key_id(b"b")
    assert a is not None
    assert b is not None
    busy = PartitionOrder(1)
    busy.entries = {
        a: BlockedKey(
            Location("orders-retry-1", 1, 5), (Held(0, 10, 4_000), Held(1, 11, 5_000)), since_ms=1_000
        ),
        b: BlockedKey(Location("orders-dlt", 1, 2), (), since_ms=500, in_dlt=True),
    }
    state = OrderState("orders-order-state", now_ms=10_000, partitions=[PartitionOrder(0), busy])
    got = {(m.name, m.tags["partition"]): (m.kind, m.value) for m in ordering_gauges(state, "orders", 10_000)}
    assert got == {
        ("kafka_retry.ordering.blocked_keys", "0"): ("gauge", 0),
        ("kafka_retry.ordering.held_records", "0"): ("gauge", 0),
        ("kafka_retry.ordering.oldest_hold_age_s", "0"): ("gauge", 0.0),
        ("kafka_retry.ordering.blocked_keys", "1"): ("gauge", 2),
        ("kafka_retry.ordering.held_records", "1"): ("gauge", 2),
        ("kafka_retry.ordering.oldest_hold_age_s", "1"): ("gauge", 6.0),  # the record held at 4 s
    }
    assert all(m.tags["topology"] == "orders" for m in ordering_gauges(state, "orders", 10_000))


def test_a_lane_carries_the_state_topic_of_its_key_order_gauges():
    lanes = [{"name": "main", "topics": ["orders"], "group": "g", "tier_index": 0, "order_state_topic": "s"}]
    assert check_lanes(lanes)[0]["order_state_topic"] == "s"
