"""The compacted-log base (`engine/logs/compacted_log.py`): its entry codec, as both logs apply entries."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.logs.compacted_log import decode_entry, encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, done_key, plan_key, record_key


def test_an_entry_is_compact_sorted_json_and_a_tombstone_decodes_to_none() -> None:
    assert encode_entry({"b": 1, "a": [2, "x"]}) == b'{"a":[2,"x"],"b":1}'
    assert decode_entry(encode_entry({"b": 1})) == {"b": 1}
    assert decode_entry(None) is None
    assert decode_entry(b"") is None
    with pytest.raises(ValueError, match="Expecting property name"):
        decode_entry(b"{not json")


def test_the_replay_log_applies_entries_and_tombstones_last_value_wins() -> None:
    log = ReplayLog("orders-dlt-replay-log")
    log.add(record_key(0, 5), encode_entry({"replay_id": "r-1"}))
    log.add(record_key(0, 6), encode_entry({"replay_id": "r-1"}))
    log.add(plan_key("r-1"), encode_entry({"started_ms": 1}))
    log.add(done_key("r-1"), encode_entry({"moved": 2}))
    log.add(record_key(0, 5), encode_entry({"replay_id": "r-2"}))
    log.add(record_key(0, 6), None)  # a tombstone
    log.add(done_key("r-1"), None)
    log.add(b"other/key", encode_entry({"ignored": True}))
    log.add(None, encode_entry({"no": "key"}))
    assert log.moved == {(0, 5): {"replay_id": "r-2"}}
    assert (log.plans, log.done) == ({"r-1": {"started_ms": 1}}, {})


def test_a_log_whose_name_kafka_would_refuse_is_named_with_what_to_shorten() -> None:
    import pytest

    from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
    from airflow_kafka_retry.engine.logs.redelivery_log import redelivery_log_topic
    from airflow_kafka_retry.engine.logs.replay_log import log_topic
    from airflow_kafka_retry.policy.errors import ReplayError

    assert redelivery_log_topic("orders") == "orders-redelivery-log"
    assert log_topic("orders-dlt") == "orders-dlt-replay-log"
    long = "t" * 240
    too_long = "longer than Kafka's 249 characters"
    with pytest.raises(KafkaConfigError, match=f"redelivery log of .*{too_long}; shorten the topology's"):
        redelivery_log_topic(long)
    with pytest.raises(ReplayError, match=f"replay log of .*{too_long}; shorten the topic name"):
        log_topic(long)
