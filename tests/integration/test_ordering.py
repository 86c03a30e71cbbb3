"""Key-ordered retries (``ordering: key``, ``docs/ordering.md``) on real Kafka, through the local engine."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Location, Mark, key_id
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


def create_topics(
    bootstrap: str, topology: Topology, state_policy: str = "compact", state_partitions: int = PARTITIONS
) -> None:
    """The topology's topics, as its setup creates them; a state topic made by hand before it, if asked."""
    config = {"bootstrap.servers": bootstrap}
    state = topology.order_state_topic
    assert state is not None
    by_hand = (state_policy, state_partitions) != ("compact", PARTITIONS)
    if by_hand:
        new = NewTopic(state, state_partitions, 1, config={"cleanup.policy": state_policy})
        admin = AdminClient(config)  # kept until its futures are done (a dropped client cancels them)
        for future in admin.create_topics([new]).values():
            future.result(30)
    try:
        ensure_topics(topology, config, partitions=PARTITIONS)
    except KafkaConfigError:  # the setup reports (never alters) a state topic that is not compacted
        if state_policy == "compact":
            raise


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, dict, list | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=json.dumps(value).encode(), headers=headers or [])
    assert producer.flush(30) == 0


def options(**overrides) -> DrainOptions:
    return DrainOptions(handler=f"{HANDLER}:handle", batch_size=50, chunk_size=300, **overrides)


def drain(
    bootstrap: str,
    topology: Topology,
    done,
    opts: DrainOptions | None = None,
    timeout: float = 45.0,
    in_process: bool = True,
):
    """Run every tier again and again until ``done()`` and a pass finds nothing to do."""
    config = {"bootstrap.servers": bootstrap}
    give_up = time.monotonic() + timeout
    summaries = []
    while True:
        drained = 0
        for tier in topology.tiers:
            summary = run_local(
                topology, tier, config, opts or options(), parallelism=PARTITIONS, in_process=in_process
            )
            assert summary.ok, json.dumps(summary.to_dict()["partitions"], indent=1)[:3000]
            summaries.append(summary)
            drained += summary.to_dict()["totals"]["drained"]
        if done() and drained == 0:
            return summaries
        assert time.monotonic() < give_up, "the tiers did not settle in time"
        time.sleep(0.3)


def kid(key: bytes) -> bytes:
    found = key_id(key)
    assert found is not None
    return found


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

    def key_bytes(k: int) -> bytes:  # every tenth key binary and 8 KB long: its key id names it in the state
        return b"\x00\xff" + k.to_bytes(2, "big") * 4000 if k % 10 == 4 else f"key-{k}".encode()

    for k in range(4, keys, 10):
        fails[(k, 4)] = 2
    records = [
        (key_bytes(k), {"k": f"key-{k}", "s": s, "f": fails.get((k, s), 0)}, None)
        for s in range(per_key)
        for k in range(keys)
    ]
    records += [(None, {"k": "null", "s": s, "f": 1 if s % 2 else 0}, None) for s in range(20)]
    produce(kafka_bootstrap, topology.topic, records)
    dead = {(k, s) for (k, s), n in fails.items() if n == 99}
    expected = len(records) - len(dead)

    # in worker processes: every engine builds the partition job, which picks the keeper and marking lanes
    summaries = drain(
        kafka_bootstrap,
        topology,
        lambda: sum(map(len, handled(path).values())) >= expected,
        in_process=False,
    )

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
    assert summaries[0].to_dict()["totals"]["ordering"]["held"] > 0  # the operator's report shows them


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
    release = Mark(kid(key), "release", None, by="test", reason="fixed by hand")
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
    forged = Mark(kid(key), "release", None, by="forger")
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


def test_a_state_topic_with_another_partition_count_is_refused(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology, state_partitions=1)
    summary = run_local(topology, topology.tiers[0], {"bootstrap.servers": kafka_bootstrap}, options())
    error = summary.partitions[0].error
    assert not summary.ok
    assert f"{topology.order_state_topic!r} has 1 partitions, the main topic" in error, error
    assert f"has {PARTITIONS}" in error, error


def test_a_state_entry_that_is_not_ours_stops_the_keeper_naming_it(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topology.order_state_topic, key=kid(b"k"), value=b"{not json", partition=1)
    assert producer.flush(10) == 0
    summary = run_local(topology, topology.tiers[0], {"bootstrap.servers": kafka_bootstrap}, options())
    failed = {p.partition: p.error for p in summary.partitions if p.status != "ok"}
    assert list(failed) == [1]
    assert f"{topology.order_state_topic}[1]@0" in failed[1], failed


def test_a_lost_hold_topic_stops_the_keeper_naming_the_held_records(kafka_bootstrap, tmp_path):
    ledger.ledger_path(tmp_path)
    topology = make_topology()
    create_topics(kafka_bootstrap, topology)
    config = {"bootstrap.servers": kafka_bootstrap}
    produce(
        kafka_bootstrap,
        topology.topic,
        [(b"k", {"k": "k", "s": 0, "f": 99}, None), (b"k", {"k": "k", "s": 1}, None)],
    )
    assert run_local(topology, topology.tiers[0], config, options(), in_process=True).ok
    admin = AdminClient(config)
    for future in admin.delete_topics([topology.hold_topic]).values():
        future.result(30)
    give_up = time.monotonic() + 30
    while topology.hold_topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < give_up, "the hold topic was not deleted"
        time.sleep(0.2)
    summary = run_local(topology, topology.tiers[0], config, options(), in_process=True)
    errors = [p.error for p in summary.partitions if p.status != "ok"]
    assert len(errors) == PARTITIONS, errors  # each keeper stops; the one with the held record says so
    assert all(f"topic {topology.hold_topic!r} does not exist" in e for e in errors), errors
    (held,) = [e for e in errors if "1 held record(s)" in e]
    assert "restore the topic, or release their keys (airflow-kafka-retry ordering release)" in held


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


@pytest.mark.parametrize("mark_first", [True, False], ids=["mark-first", "record-first"])
def test_a_replayed_head_in_main_is_the_head_whichever_comes_first(kafka_bootstrap, tmp_path, mark_first):
    """Under release_on: replay the head is replayed into main: its moved mark and the record race."""
    path = ledger.ledger_path(tmp_path)
    topology = make_topology("replay")
    create_topics(kafka_bootstrap, topology)
    config = {"bootstrap.servers": kafka_bootstrap}
    key = b"acct-5"
    records = [(key, {"k": "acct-5", "s": 0, "fatal": True}, None)]
    records += [(key, {"k": "acct-5", "s": s}, None) for s in (1, 2)]
    produce(kafka_bootstrap, topology.topic, records)
    main = topology.tiers[0]
    assert run_local(topology, main, config, options(), in_process=True).ok
    (dead,) = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    p = dead.partition()

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    replayed: list[int] = []

    def replay_record() -> None:  # the replay's copy, fixed: it succeeds now
        value = json.dumps({"k": "acct-5", "s": 0}).encode()
        producer.produce(
            topology.topic,
            key=key,
            value=value,
            partition=p,
            on_delivery=lambda e, m: replayed.append(m.offset()),
        )
        assert producer.flush(10) == 0

    def moved_mark() -> None:
        at = Location(dead.topic(), p, dead.offset())
        mark = Mark(kid(key), "moved", at, Location(topology.topic, p, replayed[0]))
        producer.produce(
            topology.hold_topic,
            key=mark.key_id,
            value=mark.to_bytes(),
            partition=p,
            headers=[(ORDER_HEADER, MARK)],
        )
        assert producer.flush(10) == 0

    if mark_first:
        # the offset the replayed record will take: the main partition's end (nothing else is produced)
        replayed.append(_end(config, topology.topic, p))
        moved_mark()
        assert run_local(topology, main, config, options(), in_process=True).ok
        predicted = replayed.pop()
        replay_record()
        assert replayed == [predicted]
    else:
        replay_record()
        keeper = run_local(topology, main, config, options(), in_process=True)
        assert totals([keeper], "held") == 1, "the replayed record came before its mark: it waits"
        moved_mark()
    drain(kafka_bootstrap, topology, lambda: len(handled(path).get("acct-5", [])) == 3)
    assert handled(path)["acct-5"] == [0, 1, 2]


def _end(config: dict, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": unique_topic("end")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()
