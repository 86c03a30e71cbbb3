"""
A scheduled redrive policy's rounds on real Kafka (issue 51, part 3).

A policy takes ``InvalidOrder`` dead letters (``after: 0s``) at most twice. The handler fails them every
time, so each redriven copy is parked again by the engine. Rounds at four ticks, with a tier run between:

1. the first round redrives the four matching records, not the two others, each once;
2. the same tick's round again (an Airflow retry of the task, or another policy of the tick) redrives none
   of the copies parked since: never one record twice in a round;
3. the next tick's round redrives the four parked copies (their second redrive);
4. the one after leaves them parked (``max_redrives`` reached), and parks into the parking topic a copy a
   service outside the engine dead-lettered to the DLT (its count read from the replay log);
5. the last moves nothing: nothing loops.

Every move is audited in the replay logs: each round's status, and each record's entry with its count.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.dlt.redrive import run_round
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, log_topic, read_log
from airflow_kafka_retry.policy.headers import replay as R
from airflow_kafka_retry.policy.redrive.rounds import park_id, round_id
from airflow_kafka_retry.policy.topology.model import Topology

from tests.support import ledger

pytestmark = pytest.mark.integration

INVALID = f"{ledger.HANDLER_MODULE}.InvalidOrder"
TICK = 1_800_000_000_000
MINUTE = 60_000


def _topology() -> Topology:
    base = ledger.make_topology("redrive")
    policy = {"name": "invalid", "exception": [INVALID], "after": "0s", "every": "1m", "max_redrives": 2}
    data = {
        "topic": base.topic,
        "group_id": base.group_id,
        "attempts": base.attempts,
        "backoff": {"kind": "fixed", "delay": "0ms"},
        "not_retryable": list(base.not_retryable),
        "redrive": [policy],
    }
    return Topology.from_mapping(data, source=base.source)


def _drain(topology: Topology, config: dict) -> None:
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    assert run_local(topology, topology.tier(0), config, options).ok


def _by_replay(bootstrap: str, topic: str) -> Counter:
    """(key, replay id) of every replayed copy in ``topic`` (the records never replayed left out)."""
    found = Counter()
    for message in ledger.read_all(bootstrap, topic):
        audit = R.read_replay_audit(message.headers())
        if audit is not None:
            found[(message.key().decode(), audit.replay_id)] += 1
    return found


def _logs(config: dict, topology: Topology) -> dict[str, ReplayLog]:
    with TopicReader(config) as reader:
        return {t: read_log(reader, log_topic(t)) for t in (topology.dlt_topic, topology.parking_topic)}


def test_a_policy_redrives_only_its_records_never_twice_a_round_and_parks_them(
    kafka_bootstrap, tmp_path, monkeypatch
):
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = _topology()
    [policy] = topology.redrive
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    producer = Producer({**config, "enable.idempotence": True})
    for key, mode in [*((f"a{i}", "fatal") for i in range(4)), ("b0", "bad-json"), ("b1", "bad-json")]:
        value = b"{not json" if mode == "bad-json" else json.dumps({"id": key, "mode": mode}).encode()
        producer.produce(topology.topic, key=key.encode(), value=value, partition=0)
    assert producer.flush(30) == 0
    _drain(topology, config)  # all six to the DLT: four InvalidOrder, two DeserializationError
    matching = {f"a{i}" for i in range(4)}
    main, parking, dlt = topology.topic, topology.parking_topic, topology.dlt_topic

    def run(tick: int):
        return run_round(topology, config, policy, tick_ms=tick)

    first = run(TICK)
    assert (first.status, first.redriven, first.parked, first.held) == ("done", 4, 0, 0), first
    r1 = round_id("invalid", TICK)
    assert _by_replay(kafka_bootstrap, main) == {(k, r1): 1 for k in matching}, "only matching, each once"

    _drain(topology, config)  # the copies fail again: the engine parks them
    assert {k for k, _ in _by_replay(kafka_bootstrap, parking)} == matching
    again = run(TICK)  # the same tick's round
    assert (again.redriven, again.later) == (0, 4), again
    assert _by_replay(kafka_bootstrap, main) == {(k, r1): 1 for k in matching}, "a record twice in a round"

    second = run(TICK + MINUTE)
    assert (second.redriven, second.held) == (4, 0), second
    r2 = round_id("invalid", TICK + MINUTE)
    assert _by_replay(kafka_bootstrap, main) == {
        **{(k, r1): 1 for k in matching},
        **{(k, r2): 1 for k in matching},
    }

    _drain(topology, config)  # parked again, redriven twice now
    # a service outside the engine dead-letters a redriven copy to the DLT, keeping its headers (Spring does)
    copies = [m for m in ledger.read_all(kafka_bootstrap, main) if R.read_replay_audit(m.headers())]
    copy = next(m for m in copies if R.read_replay_audit(m.headers()).replay_id == r2)
    headers = [*copy.headers(), ("kafka_exception-fqcn", INVALID.encode())]
    producer.produce(dlt, key=copy.key(), value=copy.value(), headers=headers, partition=0)
    assert producer.flush(30) == 0

    third = run(TICK + 2 * MINUTE)
    assert (third.redriven, third.held, third.parked) == (0, 4, 1), third
    parked = _by_replay(kafka_bootstrap, parking)
    r3_park = park_id(round_id("invalid", TICK + 2 * MINUTE))
    assert parked[(copy.key().decode(), r3_park)] == 1, parked
    last = run(TICK + 3 * MINUTE)
    assert (last.redriven, last.parked, last.held) == (0, 0, 5), "nothing loops"
    assert [p["moved"] for p in last.passes] == [0, 0]
    assert sum(_by_replay(kafka_bootstrap, main).values()) == 8

    logs = _logs(config, topology)
    assert logs[dlt].statuses[r1]["state"] == "done"
    assert logs[dlt].statuses[r1]["moved"] == 4
    assert logs[parking].statuses[r2]["moved"] == 4
    assert logs[dlt].statuses[r3_park]["moved"] == 1
    assert r1 not in logs[parking].statuses, "a pass that finds nothing to move writes nothing"
    assert sorted(e["redrives"] for e in logs[dlt].moved.values()) == [1, 1, 1, 1, 2]
    assert sorted(e["redrives"] for e in logs[parking].moved.values()) == [2, 2, 2, 2]
    assert [e.get("parked") for e in logs[dlt].moved.values() if e["replay_id"] == r3_park] == [True]
    assert {e["policy"] for log in logs.values() for e in log.moved.values()} == {"invalid"}
