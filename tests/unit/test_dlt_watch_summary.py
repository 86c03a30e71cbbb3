"""The DLT watch's summary and the exception headers it reads, from either Spring header family (no
broker)."""

from __future__ import annotations

from airflow_kafka_retry.engine.scans.dlt_scan import UNKNOWN_EXCEPTION, DltWatchSummary
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.headers.codec import read_exception_classes


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, headers: list) -> None:
        self._t, self._p, self._o, self._h = topic, partition, offset, headers

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def headers(self):
        return self._h

    def timestamp(self):  # CreateTime
        return (1, 1_700_000_000_000)

    def value(self):  # the summary must never need it
        raise AssertionError("the summary read a payload")


def test_exception_classes_from_either_family():
    assert read_exception_classes(
        [("kafka_exception-fqcn", b"a.B"), ("kafka_exception-cause-fqcn", b"c.D")]
    ) == ("a.B", "c.D")
    dead_letter_family = [("kafka_dlt-exception-fqcn", b"x.Y"), ("kafka_dlt-exception-cause-fqcn", b"z.W")]
    assert read_exception_classes(dead_letter_family) == ("x.Y", "z.W")
    # the last header wins across families; a key exception counts when the value has none
    assert (
        read_exception_classes([("kafka_dlt-exception-fqcn", b"old.E"), ("kafka_exception-fqcn", b"new.E")])[
            0
        ]
        == "new.E"
    )
    assert read_exception_classes([("kafka_dlt-key-exception-fqcn", b"k.E")]) == ("k.E", None)
    assert (
        read_exception_classes([("kafka_key-exception-fqcn", b"k.E"), ("kafka_exception-fqcn", b"v.E")])[0]
        == "v.E"
    )
    assert read_exception_classes(None) == (None, None)
    assert read_exception_classes([("kafka_exception-fqcn", None)]) == (None, None)


def test_summary_counts_and_caps_coordinates():
    summary = DltWatchSummary(group="g", coordinate_cap=2)
    summary.add(
        FakeMessage(
            "orders-dlt",
            0,
            5,
            [
                ("kafka_dlt-original-topic", b"orders"),
                ("kafka_dlt-original-partition", H.encode_int32(3)),
                ("kafka_dlt-original-offset", H.encode_int64(99)),
                ("kafka_dlt-exception-fqcn", b"a.Bad"),
            ],
        )
    )
    summary.add(
        FakeMessage(
            "orders-dlt",
            1,
            0,
            [("kafka_exception-fqcn", b"a.Bad"), ("kafka_exception-cause-fqcn", b"c.Root")],
        )
    )
    summary.add(FakeMessage("orders-x-dlt", 0, 2, []))
    assert summary.totals() == {
        "new_records": 3,
        "dead_lettered": {UNKNOWN_EXCEPTION: 1, "a.Bad": 2},
        "causes": {"c.Root": 1},
        "dlt_topics": {"orders-dlt": 2, "orders-x-dlt": 1},
        "families": {"spring-dead-letter": 1, "spring-retry-topic": 1, "unknown": 1},
        "dlt_topic_families": {
            "orders-dlt": {"spring-dead-letter": 1, "spring-retry-topic": 1},
            "orders-x-dlt": {"unknown": 1},
        },
        "missing": {
            "delivery_count": 3,
            "failure_class": 1,
            "failure_message": 3,
            "group_or_connector": 3,
            "original_offset": 2,
            "original_partition": 2,
            "original_timestamp": 3,
            "original_topic": 2,
        },
        "unreadable_headers": {},
    }
    assert summary.dead_letters == [
        {
            "topic": "orders",
            "partition": 3,
            "offset": 99,
            "exception": "a.Bad",
            "cause": None,
            "consumer_group": None,
            "family": "spring-dead-letter",
            "connector": None,
            "failure_message": None,
            "delivery_count": None,
            "dlt_topic": "orders-dlt",
            "dlt_partition": 0,
            "dlt_offset": 5,
        },
        {
            "topic": None,
            "partition": None,
            "offset": None,
            "exception": "a.Bad",
            "cause": "c.Root",
            "consumer_group": None,
            "family": "spring-retry-topic",
            "connector": None,
            "failure_message": None,
            "delivery_count": None,
            "dlt_topic": "orders-dlt",
            "dlt_partition": 1,
            "dlt_offset": 0,
        },
    ]
    assert summary.dead_letters_truncated == 1


def test_the_watch_counts_every_family_by_its_failure():
    """Connect by exception class, a share group (no class) by the broker's reason, bad headers by name."""
    summary = DltWatchSummary(group="g")
    connect = [
        ("__connect.errors.topic", b"orders"),
        ("__connect.errors.partition", b"2"),
        ("__connect.errors.offset", b"17"),
        ("__connect.errors.connector.name", b"sink"),
        ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
    ]
    share = [
        ("__dlq.errors.topic", b"orders"),
        ("__dlq.errors.partition", b"x1"),  # not decimal: reported, the rest still read
        ("__dlq.errors.offset", b"8"),
        ("__dlq.errors.group", b"workers"),
        ("__dlq.errors.delivery.count", b"5"),
        ("__dlq.errors.message", b"Offset delivery count exceeded the threshold."),
    ]
    summary.add(FakeMessage("connect-dlq", 0, 0, connect))
    summary.add(FakeMessage("dlq.workers", 0, 0, share))
    totals = summary.totals()
    assert totals["dead_lettered"] == {
        "<share-group: Offset delivery count exceeded the threshold.>": 1,
        "org.apache.kafka.connect.errors.DataException": 1,
    }
    assert totals["families"] == {"kafka-connect": 1, "share-group": 1}
    assert totals["unreadable_headers"] == {"__dlq.errors.partition": 1}
    first, second = summary.dead_letters
    assert (first["topic"], first["partition"], first["offset"], first["connector"]) == (
        "orders",
        2,
        17,
        "sink",
    )
    assert (second["topic"], second["partition"], second["offset"]) == ("orders", None, 8)
    assert (second["consumer_group"], second["delivery_count"]) == ("workers", 5)


def test_a_named_queues_family_names_its_headerless_records_only():
    """``assume`` per topic: a headerless record of that queue is the family, with what the family lacks."""
    summary = DltWatchSummary(group="g", assume={"connect-dlq": "kafka-connect"})
    summary.add(FakeMessage("connect-dlq", 0, 4, [("trace-id", b"t-1")]))  # Connect without context headers
    summary.add(FakeMessage("other-dlq", 0, 9, []))  # the same, in a queue named without a family
    share = [
        ("__dlq.errors.topic", b"orders"),
        ("__dlq.errors.partition", b"1"),
        ("__dlq.errors.offset", b"3"),
    ]
    summary.add(FakeMessage("connect-dlq", 0, 5, share))  # a family's headers win over the queue's family
    connect, unknown, detected = summary.dead_letters
    assert (connect["family"], connect["dlt_topic"], connect["dlt_offset"]) == (
        "kafka-connect",
        "connect-dlq",
        4,
    )
    assert (connect["topic"], connect["partition"], connect["offset"]) == (None, None, None)
    assert connect["exception"] == UNKNOWN_EXCEPTION
    assert unknown["family"] == "unknown"
    assert (detected["family"], detected["topic"], detected["partition"], detected["offset"]) == (
        "share-group",
        "orders",
        1,
        3,
    )
    totals = summary.totals()
    assert totals["dlt_topic_families"] == {
        "connect-dlq": {"kafka-connect": 1, "share-group": 1},
        "other-dlq": {"unknown": 1},
    }
    # what each lacks: the Connect one all but its timestamp (the source's, which Connect keeps); the
    # unknown one all but when it was dead-lettered; the share one its group, failure and original timestamp
    assert totals["missing"] == {
        "delivery_count": 3,
        "failed_at": 1,
        "failure_class": 3,
        "failure_message": 3,
        "group_or_connector": 3,
        "original_offset": 2,
        "original_partition": 2,
        "original_timestamp": 2,
        "original_topic": 2,
    }
    assert summary.by_topic_family_exception == {
        ("connect-dlq", "kafka-connect", UNKNOWN_EXCEPTION): 1,
        ("other-dlq", "unknown", UNKNOWN_EXCEPTION): 1,
        ("connect-dlq", "share-group", UNKNOWN_EXCEPTION): 1,
    }
