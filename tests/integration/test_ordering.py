"""Key-ordered retries (``ordering: key``, ``docs/ordering.md``) on real Kafka, through the local engine."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Mark, key_id
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]

HANDLER = "tests.support.ordering_handler"
PARTITIONS = 2


def make_topology(release_on: str = "dlt") -> Topology:
    topic = unique_topic("ordered")
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 3,
            "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 1.5, "max": "2s"},
            "not_retryable": [f"{HANDLER}.Fatal"],
            "ordering": "key",
            "release_on": release_on,
        },
        source=f"<ordering {topic}>",
    )


def create_topics(bootstrap: str, topology: Topology, state_policy: str = "compact") -> None:
    config = {"bootstrap.servers": bootstrap}
    ensure_topics(topology, config, partitions=PARTITIONS)
    hold, state = topology.hold_topic, topology.order_state_topic
    assert hold is not None
    assert state is not None
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(hold, PARTITIONS, 1, config={"retention.ms": "-1"}),
        NewTopic(state, PARTITIONS, 1, config={"cleanup.policy": state_policy}),
    ]
    for future in admin.create_topics(new).values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, dict, list | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=json.dumps(value).encode(), headers=headers or [])
    assert producer.flush(30) == 0


def options(**overrides) -> DrainOptions:
    return DrainOptions(handler=f"{HANDLER}:handle", batch_size=50, chunk_size=300, **overrides)


def drain(bootstrap: str, topology: Topology, done, opts: DrainOptions | None = None, timeout: float = 45.0):
    """Run every tier again and again until ``done()`` and a pass finds nothing to do."""
    config = {"bootstrap.servers": bootstrap}
    give_up = time.monotonic() + timeout
    summaries = []
    while True:
        drained = 0
        for tier in topology.tiers:
            summary = run_local(topology, tier, config, opts or options(), in_process=True)
            assert summary.ok, json.dumps(summary.to_dict()["partitions"], indent=1)[:3000]
            summaries.append(summary)
            drained += summary.to_dict()["totals"]["drained"]
        if done() and drained == 0:
            return summaries
        assert time.monotonic() < give_up, "the tiers did not settle in time"
        time.sleep(0.3)


def handled(path: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    with open(path) as fh:
        for line in fh:
            key, seq = line.split()
            out[key].append(int(seq))
    return out


def totals(summaries, name: str) -> int:
    return sum(getattr(p, name) for s in summaries for p in s.partitions)


def test_each_key_keeps_its_order_through_retries_and_dlt(kafka_bootstrap, tmp_path):
    path = ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology)
    keys, per_key = 200, 10
    fails: dict[tuple[int, int], int] = {}
    for k in range(keys):
        if k % 10 == 0:
            fails[(k, 3)] = 1  # once: handled from retry-1
        elif k % 10 == 1:
            fails[(k, 2)] = 2  # twice: handled from retry-2
        elif k % 10 == 2:
            fails[(k, 5)] = 99  # always: dead-lettered, the key moves on (release_on: dlt)
        elif k % 10 == 3:
            fails[(k, 0)] = 1  # the first and the second fail once each
            fails[(k, 1)] = 1
    records = [
        (f"key-{k}".encode(), {"k": f"key-{k}", "s": s, "f": fails.get((k, s), 0)}, None)
        for s in range(per_key)
        for k in range(keys)
    ]
    records += [(None, {"k": "null", "s": s, "f": 1 if s % 2 else 0}, None) for s in range(20)]
    produce(kafka_bootstrap, topology.topic, records)
    dead = {(k, s) for (k, s), n in fails.items() if n == 99}
    expected = len(records) - len(dead)

    summaries = drain(kafka_bootstrap, topology, lambda: sum(map(len, handled(path).values())) >= expected)

    seen = handled(path)
    for k in range(keys):
        want = [s for s in range(per_key) if (k, s) not in dead]
        assert seen[f"key-{k}"] == want, f"key-{k}: handled {seen[f'key-{k}']}, expected {want}"
    assert sorted(seen["null"]) == list(range(20))
    dlt = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    assert sorted(json.loads(m.value())["k"] for m in dlt) == sorted(f"key-{k}" for k, _ in dead)
    assert totals(summaries, "held") > 0
    assert totals(summaries, "released") == totals(summaries, "held")  # every held record came back
    assert totals(summaries, "marks_written") > 0


def test_release_on_replay_keeps_the_key_blocked_until_released(kafka_bootstrap, tmp_path):
    path = ledger.ledger_path(tmp_path)
    topology = make_topology("replay")
    create_topics(kafka_bootstrap, topology)
    key = b"acct-42"
    records = [(key, {"k": "acct-42", "s": 0, "fatal": True}, None)]
    records += [(key, {"k": "acct-42", "s": s}, None) for s in (1, 2, 3)]
    records += [(b"other", {"k": "other", "s": 0}, None)]
    produce(kafka_bootstrap, topology.topic, records)

    drain(kafka_bootstrap, topology, lambda: "other" in handled(path))
    assert "acct-42" not in handled(path), "a key dead-lettered under release_on: replay moved on"

    dlt = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    assert len(dlt) == 1
    release = Mark(key_id(key), "release", None, by="test", reason="fixed by hand")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(
        topology.hold_topic,
        key=release.key_id,
        value=release.to_bytes(),
        partition=dlt[0].partition(),
        headers=[(ORDER_HEADER, MARK)],
    )
    assert producer.flush(10) == 0

    drain(kafka_bootstrap, topology, lambda: len(handled(path).get("acct-42", [])) == 3)
    assert handled(path)["acct-42"] == [1, 2, 3]


def test_forged_records_release_nothing(kafka_bootstrap, tmp_path):
    """A tier record with the head's key is not the head; an order header on a main record is data."""
    path = ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology)
    config = {"bootstrap.servers": kafka_bootstrap}
    key = b"acct-7"
    records = [(key, {"k": "acct-7", "s": 0, "f": 99}, None), (key, {"k": "acct-7", "s": 1}, None)]
    forged = Mark(key_id(key), "release", None, by="forger")
    records += [(b"acct-8", {"k": "acct-8", "s": 0}, [(ORDER_HEADER, b"held")])]
    records += [(forged.key_id, {"k": "acct-9", "s": 0}, [(ORDER_HEADER, MARK)])]
    produce(kafka_bootstrap, topology.topic, records)
    main = topology.tiers[0]
    run_local(topology, main, config, options(), in_process=True)
    assert sorted(handled(path)) == ["acct-8", "acct-9"], "records with order headers were not handled"

    retry = topology.tiers[1]
    head = ledger.read_all(kafka_bootstrap, retry.topic)
    assert len(head) == 1
    forger = Producer({"bootstrap.servers": kafka_bootstrap})
    forger.produce(
        retry.topic,
        key=key,
        value=json.dumps({"k": "acct-7", "s": 99}).encode(),
        partition=head[0].partition(),
    )
    assert forger.flush(10) == 0
    time.sleep(1.2)  # retry-1's delay
    summary = run_local(topology, retry, config, options(), in_process=True)
    assert summary.ok
    assert summary.to_dict()["totals"]["drained"] == 2
    keeper = run_local(topology, main, config, options(), in_process=True)
    assert keeper.ok
    assert handled(path)["acct-7"] == [99], "the forged record's mark released the key"
    assert totals([keeper], "marks_ignored") >= 1

    drain(kafka_bootstrap, topology, lambda: 1 in handled(path).get("acct-7", []))
    assert handled(path)["acct-7"] == [99, 1]


def test_a_state_topic_without_compaction_is_refused(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology, state_policy="delete")
    summary = run_local(topology, topology.tiers[0], {"bootstrap.servers": kafka_bootstrap}, options())
    assert not summary.ok
    error = summary.partitions[0].error
    assert topology.order_state_topic in error, error
    assert "cleanup.policy=compact" in error, error


def test_ordering_without_transactions_is_refused(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology)
    for tier in topology.tiers[:2]:
        summary = run_local(
            topology, tier, {"bootstrap.servers": kafka_bootstrap}, options(transactional=False)
        )
        assert not summary.ok
        assert "ordering: key needs transactional=True" in summary.partitions[0].error
