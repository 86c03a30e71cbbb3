"""The key-order lanes' pure parts: held copies read back, and the refusals' messages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_kafka_retry.engine.drain.ordering.checks import (
    OrderingRefused,
    hold_missing,
    require_transactions,
)
from airflow_kafka_retry.engine.drain.ordering.held import HeldMessage, own_headers
from airflow_kafka_retry.engine.drain.ordering.lanes import KEEPING, MARKING, ordering_lane
from airflow_kafka_retry.policy.ordering.entries import ORDER_HEADER
from airflow_kafka_retry.policy.topology.model import Topology


class _Copy:
    """A held copy as the consumer returns it (hold topic coordinates, the engine's header)."""

    def key(self) -> bytes:
        return b"acct-1"

    def value(self) -> bytes:
        return b"debit 50"

    def headers(self) -> list:
        return [("trace", b"t1"), (ORDER_HEADER, b"held"), ("bin", None)]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1234)

    def topic(self) -> str:
        return "orders-hold"

    def partition(self) -> int:
        return 3

    def offset(self) -> int:
        return 7


def topology(**fields) -> Topology:
    return Topology.from_mapping({"topic": "orders", "group_id": "svc", **fields}, source="<test>")


def test_a_held_copy_reads_as_the_main_record_it_stands_for():
    message = HeldMessage(_Copy(), "orders", 3, 130)
    assert (message.topic(), message.partition(), message.offset()) == ("orders", 3, 130)
    assert (message.key(), message.value(), message.timestamp()) == (b"acct-1", b"debit 50", (1, 1234))
    assert message.headers() == [("trace", b"t1"), ("bin", None)]
    assert message.error() is None


def test_own_headers_drop_only_the_engines_order_header():
    assert own_headers([(ORDER_HEADER, b"mark")]) is None
    assert own_headers(None) is None
    assert own_headers([("a", b"1"), (ORDER_HEADER, b"held"), ("a", b"2")]) == [("a", b"1"), ("a", b"2")]


def test_each_tier_takes_its_lane_under_ordering_key():
    keyed = topology(ordering="key")
    assert ordering_lane(keyed, keyed.tiers[0]) is KEEPING
    assert all(ordering_lane(keyed, t) is MARKING for t in (*keyed.tiers[1:], *keyed.dlt_tiers))
    plain = topology()
    assert all(ordering_lane(plain, t) is None for t in (*plain.tiers, *plain.dlt_tiers))


def test_ordering_without_transactions_is_refused_naming_the_partition():
    keyed = topology(ordering="key")
    run = SimpleNamespace(
        topology=keyed, tier=keyed.tiers[0], partition=2, options=SimpleNamespace(transactional=False)
    )
    with pytest.raises(OrderingRefused, match=r"needs transactional=True .*orders\[2\]"):
        require_transactions(run)


def test_a_missing_hold_topic_says_what_to_do():
    assert "create it" in hold_missing("orders-hold", 0)
    message = hold_missing("orders-hold", 12)
    assert "12 held record(s)" in message
    assert "restore the topic" in message
    assert "airflow-kafka-retry ordering release" in message


def test_a_run_totals_its_ordering_counts_only_when_it_ordered():
    from airflow_kafka_retry.engine.drain.summary import PartitionSummary, RunSummary

    run = RunSummary("orders", 0, "orders", "svc", "local", 0, 0)
    run.partitions = [PartitionSummary("orders", 0, "svc"), PartitionSummary("orders", 1, "svc")]
    assert "ordering" not in run.totals()
    run.partitions[0].held, run.partitions[1].held, run.partitions[1].released = 2, 1, 3
    run.partitions[1].marks_ignored = 1
    assert run.totals()["ordering"] == {"held": 3, "released": 3, "marks_written": 0, "marks_ignored": 1}
    later = PartitionSummary("orders", 0, "svc", marks_written=4)
    run.partitions[0].absorb(later)
    assert run.totals()["ordering"]["marks_written"] == 4
