"""DltWatchOperator on the real broker: records of both Spring header families and of the engine, notifiers
called once per run with new records, the watch group committed only after them."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.engine.scans.dlt_scan import DltWatchError
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = pytest.mark.integration

PARTITIONS = 2
LEFE = "org.springframework.kafka.listener.ListenerExecutionFailedException"


def _topology() -> Topology:
    topic = unique_topic("watch")
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 2,
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
            "dlt_routing": {"-validation-dlt": ["com.acme.ValidationError"]},
        }
    )


def _spring_retry_topic_record(topic: str) -> list[tuple[str, bytes]]:
    """What Spring's non-blocking retries put on a DLT: the listener wrapper as class, the root cause as
    cause."""
    return [
        ("kafka_original-topic", topic.encode()),
        ("kafka_original-partition", H.encode_int32(1)),
        ("kafka_original-offset", H.encode_int64(41)),
        ("kafka_exception-fqcn", LEFE.encode()),
        ("kafka_exception-cause-fqcn", b"com.acme.PaymentDeclined"),
        ("kafka_exception-message", b"Listener failed; declined"),
        ("kafka_exception-stacktrace", b"at ..."),
    ]


def _spring_dead_letter_record(topic: str) -> list[tuple[str, bytes]]:
    """What a plain DeadLetterPublishingRecoverer writes (blocking retries): the kafka_dlt-* family."""
    return [
        ("kafka_dlt-original-topic", topic.encode()),
        ("kafka_dlt-original-partition", H.encode_int32(0)),
        ("kafka_dlt-original-offset", H.encode_int64(7)),
        ("kafka_dlt-original-consumer-group", b"spring-svc"),
        ("kafka_dlt-exception-fqcn", b"com.acme.ValidationError"),
        ("kafka_dlt-exception-message", b"bad order"),
        ("kafka_dlt-exception-stacktrace", b"at ..."),
    ]


def _produce(bootstrap: str, rows: list[tuple[str, int, list]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, partition, headers in rows:
        producer.produce(topic, value=b"card=4111-secret", key=b"k", partition=partition, headers=headers)
    assert producer.flush(30) == 0


class Recorder:
    """A notifier ``f(context)`` that remembers what it saw, and the watch group's offsets at that moment."""

    def __init__(self, bootstrap: str, topology: Topology, group: str) -> None:
        self.bootstrap, self.topology, self.group = bootstrap, topology, group
        self.calls: list[dict] = []
        self.committed_when_called: list[dict] = []

    def __call__(self, context) -> None:
        self.calls.append(json.loads(json.dumps(context["kafka_retry_summary"])))
        self.committed_when_called.append(_committed(self.bootstrap, self.topology, self.group))


def _committed(bootstrap: str, topology: Topology, group: str) -> dict:
    return {t.topic: ledger.committed(bootstrap, group, t.topic, PARTITIONS) for t in topology.dlt_tiers}


def _dlt_coordinates(bootstrap: str, topology: Topology) -> list[tuple[str, int, int]]:
    """``(topic, partition, offset)`` of every record on the topology's DLTs, read from the topics."""
    return sorted(
        (m.topic(), m.partition(), m.offset())
        for t in topology.dlt_tiers
        for m in ledger.read_all(bootstrap, t.topic)
    )


def _reported(result: dict) -> list[tuple[str, int, int]]:
    """Where the records a watch reported sit, once per report (sorted)."""
    return sorted((d["dlt_topic"], d["dlt_partition"], d["dlt_offset"]) for d in result["dead_letters"])


def _watch(topology, conn, notifiers, **kwargs) -> dict:
    return DltWatchOperator(
        task_id="watch_dlt", topology=topology, kafka_conn_id=conn, on_dlt=notifiers, **kwargs
    ).execute({})


def test_watch_reports_both_spring_families_and_engine_records_then_commits(
    kafka_bootstrap, kafka_conn, tmp_path
):
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS)
    dlt, validation_dlt = (t.topic for t in topology.dlt_tiers)
    # the engine dead-letters the main topic's fatal and undecodable records (and the failures: attempts 2)
    ledger.ledger_path(tmp_path)
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 14, PARTITIONS)
    summary = run_local(
        topology,
        topology.tier(0),
        {"bootstrap.servers": kafka_bootstrap},
        DrainOptions(
            handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
        ),
    )
    assert summary.ok
    engine_dead = summary.totals()["dead_lettered"]
    assert sum(engine_dead.values()) == 4  # 2 fatal + 2 bad-json (the others go to retry-1)
    # records as Spring writes them (Spring's header names and encodings, produced here from Python), to both
    # DLTs, in each header family
    _produce(
        kafka_bootstrap,
        [
            (dlt, 1, _spring_retry_topic_record(topology.topic)),
            (validation_dlt, 0, _spring_dead_letter_record(topology.topic)),
            (validation_dlt, 1, []),
        ],
    )
    group = f"{topology.group_id}-dlt-watch"
    recorder = Recorder(kafka_bootstrap, topology, group)
    before = _committed(kafka_bootstrap, topology, group)

    result = _watch(topology, kafka_conn, [recorder])

    [seen] = recorder.calls
    assert seen == {k: v for k, v in result.items() if k != "notifiers"}
    assert result["notifiers"] == {"called": 1, "succeeded": 1}
    totals = result["totals"]
    assert totals["new_records"] == 7
    assert totals["dead_lettered"] == {
        **engine_dead,
        LEFE: 1,
        "com.acme.ValidationError": 1,
        "<no exception header>": 1,
    }
    assert totals["causes"]["com.acme.PaymentDeclined"] == 1
    assert totals["dlt_topics"] == {dlt: 5, validation_dlt: 2}
    # each record on the DLTs reported once: the coordinates, read from the topics (a count would let a miss
    # and a duplicate cancel out)
    on_dlts = _dlt_coordinates(kafka_bootstrap, topology)
    assert len(on_dlts) == 7
    assert _reported(result) == on_dlts
    coordinates = {(d["dlt_topic"], d["exception"]): d for d in result["dead_letters"]}
    spring = coordinates[(validation_dlt, "com.acme.ValidationError")]
    assert (spring["topic"], spring["partition"], spring["offset"], spring["consumer_group"]) == (
        topology.topic,
        0,
        7,
        "spring-svc",
    )
    wrapped = coordinates[(dlt, LEFE)]
    assert (wrapped["topic"], wrapped["partition"], wrapped["offset"], wrapped["cause"]) == (
        topology.topic,
        1,
        41,
        "com.acme.PaymentDeclined",
    )
    engine_records = [d for d in result["dead_letters"] if d["exception"] in engine_dead]
    assert len(engine_records) == 4
    modes = {(partition, offset): mode for mode, partition, offset in inputs.records.values()}
    for d in engine_records:  # the engine's coordinates point at the main-topic record that failed
        assert d["topic"] == topology.topic
        assert modes[(d["partition"], d["offset"])] in ("fatal", "bad-json")
    assert "4111" not in json.dumps(result)  # never payloads
    # the notifier ran before the commit; the commit covers every DLT partition that had records
    assert recorder.committed_when_called == [before]
    after = _committed(kafka_bootstrap, topology, group)
    ends = {(d["dlt_topic"], d["dlt_partition"]): d["dlt_offset"] + 1 for d in result["dead_letters"]}
    for (topic, partition), end in ends.items():
        assert after[topic][partition] == end
    assert result["offsets"][f"{validation_dlt}[0]"] == {"from": None, "to": 1}

    # nothing new: no notification, nothing to commit
    again = _watch(topology, kafka_conn, [recorder])
    assert len(recorder.calls) == 1
    assert again["totals"]["new_records"] == 0
    assert again["notifiers"] == {"called": 0, "succeeded": 0}
    assert _committed(kafka_bootstrap, topology, group) == after

    # one more record: reported alone
    _produce(kafka_bootstrap, [(dlt, 0, _spring_dead_letter_record(topology.topic))])
    third = _watch(topology, kafka_conn, [recorder])
    assert len(recorder.calls) == 2
    assert third["totals"]["new_records"] == 1
    assert third["totals"]["dlt_topics"] == {dlt: 1}
    assert _reported(third) == sorted(set(_dlt_coordinates(kafka_bootstrap, topology)) - set(on_dlts))


def test_a_raising_notifier_is_logged_the_others_run_and_the_group_is_committed(kafka_bootstrap, kafka_conn):
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS)
    dlt = topology.dlt_topic
    _produce(kafka_bootstrap, [(dlt, 0, _spring_dead_letter_record(topology.topic))] * 3)
    group = f"{topology.group_id}-dlt-watch"
    recorder = Recorder(kafka_bootstrap, topology, group)

    def broken(context):
        raise RuntimeError("slack is down")

    result = _watch(topology, kafka_conn, [broken, recorder], coordinate_cap=2)
    assert result["notifiers"] == {"called": 2, "succeeded": 1}
    assert len(recorder.calls) == 1
    assert len(result["dead_letters"]) == 2
    assert result["dead_letters_truncated"] == 1
    reported = set(_reported(result))
    assert len(reported) == 2
    assert reported < set(_dlt_coordinates(kafka_bootstrap, topology))
    assert _committed(kafka_bootstrap, topology, group)[dlt][0] == 3
    assert _watch(topology, kafka_conn, [broken, recorder])["totals"]["new_records"] == 0


def test_a_run_that_dies_in_a_notifier_commits_nothing_and_reports_again(kafka_bootstrap, kafka_conn):
    topology = _topology()
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS)
    _produce(kafka_bootstrap, [(topology.dlt_topic, 1, _spring_retry_topic_record(topology.topic))])
    group = "custom-watch-group"

    def killed(context):
        raise SystemExit("worker killed")  # not an Exception: notify_dlt does not swallow it

    with pytest.raises(SystemExit):
        _watch(topology, kafka_conn, [killed], consumer_group=group)
    assert all(
        o < 0 for offsets in _committed(kafka_bootstrap, topology, group).values() for o in offsets.values()
    )
    recorder = Recorder(kafka_bootstrap, topology, group)
    assert _watch(topology, kafka_conn, recorder, consumer_group=group)["totals"]["new_records"] == 1
    assert len(recorder.calls) == 1


def test_missing_dlt_fails_naming_it_and_commits_nothing(kafka_bootstrap, kafka_conn):
    topology = _topology()  # topics never created
    with pytest.raises(DltWatchError, match=topology.dlt_topic):
        _watch(topology, kafka_conn, [])
