"""The demo's reconciliation (pure): every order in exactly one final place, or reported unaccounted for."""

from __future__ import annotations

import io

from rich.console import Console

from airflow_kafka_retry.demo.account import Parked, reconcile
from airflow_kafka_retry.demo.picture import flow_data
from airflow_kafka_retry.demo.report import print_account
from airflow_kafka_retry.policy.topology.model import Topology

TOPOLOGY = Topology.from_mapping(
    {
        "topic": "orders",
        "group_id": "svc",
        "attempts": 3,
        "backoff": {"kind": "custom", "delays": ["10s", "20s"]},
        "dlt_routing": {"-validation-dlt": ["myapp.InvalidOrder"]},
    },
    source="<test>",
)


def handled(order_id, topic, ok, *, attempt=1, due_ms=None, at=0, replayed=False):
    return {
        "id": order_id,
        "topic": topic,
        "attempt": attempt,
        "due_ms": due_ms,
        "handled_ms": at,
        "ok": ok,
        "replayed": replayed,
    }


def summary(topic, succeeded):
    return {"topic": topic, "totals": {"succeeded": succeeded}}


def test_each_order_in_its_place_with_its_path_and_lateness():
    produced = {"1": "ok", "2": "flaky", "3": "bug", "4": "undecodable", "5": "invalid"}
    books = [
        handled("1", "orders", True, at=1),
        handled("2", "orders", False, at=1),
        handled("2", "orders-retry-1", True, attempt=2, due_ms=10_000, at=12_000),
        handled("3", "orders", False, at=1),
        handled("3", "orders-retry-1", False, due_ms=10_000, at=11_000),
        handled("3", "orders-retry-2", False, due_ms=30_000, at=30_500),
        handled("3", "orders", True, at=40_000, replayed=True),
        handled("5", "orders", False, at=1),
    ]
    parked = {
        "3": [Parked("orders-dlt", 0, 0, replayed=True)],
        "4": [Parked("orders-dlt", 0, 1, replayed=True), Parked("orders-parking", 0, 0)],
        "5": [Parked("orders-validation-dlt", 1, 0)],
    }
    account = reconcile(
        TOPOLOGY,
        produced,
        books,
        parked,
        [summary("orders", 1), summary("orders-retry-1", 1), summary("orders", 1)],
    )
    assert account.final_counts() == {
        "processed on orders": 1,
        "processed on orders-retry-1": 1,
        "processed after DLT replay": 1,
        "orders-validation-dlt": 1,
        "orders-parking": 1,
    }
    assert account.reconciles
    paths = {o.order_id: o.path for o in account.orders}
    assert paths["3"] == ["orders", "orders-retry-1", "orders-retry-2", "orders-dlt", "processed"]
    assert paths["4"] == ["orders", "orders-dlt", "orders-parking"]
    assert account.lateness["orders-retry-1"] == {
        "delay_s": 10.0,
        "handled": 2,
        "p50_s": 1.5,
        "max_s": 2.0,
        "early": 0,
    }
    data = flow_data(account, TOPOLOGY)
    assert data["nodes"]["orders-dlt"]["orders"] == 2
    assert data["nodes"]["processed"]["orders"] == 3
    assert data["final"] == account.final_counts()


def test_an_order_in_two_places_or_none_is_unaccounted_for_and_not_a_place():
    produced = {"1": "ok", "2": "ok", "3": "bug", "4": "ok"}
    books = [handled("1", "orders", True), handled("3", "orders", False), handled("4", "orders", True)]
    parked = {"1": [Parked("orders-dlt", 0, 0)]}  # processed and dead-lettered: two places
    account = reconcile(TOPOLOGY, produced, books, parked, [summary("orders", 2)])
    assert account.final_counts() == {"processed on orders": 1}
    assert account.unaccounted() == {"1": ["processed on orders", "orders-dlt"], "2": [], "3": []}
    assert (account.placed, account.produced) == (1, 4)
    assert not account.reconciles
    data = account.to_dict()
    assert data["placed"] == 1
    assert data["unaccounted"] == {"1": ["processed on orders", "orders-dlt"], "2": [], "3": []}


def test_the_printed_account_counts_placed_orders_and_lists_the_unaccounted_apart():
    produced = {"1": "ok", "2": "ok", "4": "ok"}
    books = [handled("1", "orders", True), handled("4", "orders", True)]
    parked = {"1": [Parked("orders-dlt", 0, 0)]}
    account = reconcile(TOPOLOGY, produced, books, parked, [summary("orders", 2)])
    text = _printed(account)
    assert "NOT reconciled: 1 of 3 orders read back from the topic are in exactly one final place" in text
    assert (
        "Unaccounted for: 2 order(s) - order 1: processed on orders, orders-dlt; order 2: in no final place"
    ) in text
    total = next(
        [c.strip() for c in line.split("│") if c.strip()] for line in text.splitlines() if "total" in line
    )
    assert total[:2] == ["total", "1"], total  # the table's total counts placed orders only

    good = reconcile(
        TOPOLOGY,
        {"1": "ok"},
        [handled("1", "orders", True)],
        {},
        [summary("orders", 1)],
        intended=1,
        written={"1": 1},
    )
    assert good.reconciles
    assert "Reconciled: 1 of 1 orders read back from the topic" in _printed(good)
    assert "Unaccounted" not in _printed(good)


def test_what_the_producer_wrote_must_be_what_it_meant_to_and_nothing_else_turns_up():
    books = [handled("1", "orders", True), handled("9", "orders", True)]
    args = (TOPOLOGY, {"1": "ok"}, books, {"8": [Parked("orders-dlt", 0, 0)]}, [summary("orders", 2)])
    account = reconcile(*args, intended=2, written={"1": 2})
    assert account.placed == account.produced == 1
    assert (account.intended, account.written_twice, account.strangers) == (2, {"1": 2}, ["8", "9"])
    assert not account.reconciles
    text = _printed(account)
    assert "meant to write 2 orders; 1 were read back" in text
    assert "Written more than once to the topic: order 1 (2x)" in text
    assert "Handled or parked but never produced: 8, 9" in text


def _printed(account) -> str:
    console = Console(record=True, width=400, color_system=None, file=io.StringIO())
    print_account(console, account, "test")
    return console.export_text()


def test_xcom_counts_must_match_the_books():
    account = reconcile(TOPOLOGY, {"1": "ok"}, [handled("1", "orders", True)], {}, [summary("orders", 2)])
    assert account.final_counts() == {"processed on orders": 1}
    assert not account.reconciles


def test_an_order_handled_successfully_twice_is_counted_and_printed():
    produced = {"1": "ok", "2": "ok", "3": "flaky"}
    books = [
        handled("1", "orders", True, at=1),
        handled("1", "orders", True, at=2),  # a task retried after its handler ran: handled again
        handled("2", "orders", True, at=1),
        handled("3", "orders", False, at=1),
        handled("3", "orders-retry-1", True, attempt=2, due_ms=10_000, at=10_500),
        handled("3", "orders-retry-1", True, attempt=2, due_ms=10_000, at=10_600),
        handled("3", "orders-retry-1", True, attempt=2, due_ms=10_000, at=10_700),
    ]
    account = reconcile(TOPOLOGY, produced, books, {}, [summary("orders", 3), summary("orders-retry-1", 3)])
    assert account.handled_twice == 3  # once more for order 1, twice more for order 3
    assert account.to_dict()["handled_twice"] == 3
    assert account.final_counts() == {"processed on orders": 2, "processed on orders-retry-1": 1}
    assert "3 order(s) were handled successfully more than once" in _printed(account)
    once = reconcile(TOPOLOGY, {"2": "ok"}, [handled("2", "orders", True)], {}, [summary("orders", 1)])
    assert once.handled_twice == 0
    assert "more than once" not in _printed(once)
