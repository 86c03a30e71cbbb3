"""
Real Kafka Connect dead letters, read back: exactly what ``DeadLetterQueueReporter`` writes.

A Kafka Connect 4.3.1 standalone worker runs a FileStreamSink with ``JsonConverter`` values on a source topic
of the Kafka 4.4 broker; the values that are not JSON fail at the value converter stage and, with
``errors.tolerance=all``, go to the connector's DLQ. The assertions are the ground truth for decoding this
family (``policy/dead_letters/families``) and docs/dead-letter-sources.md: the source's own headers, then
Connect's context headers (only with ``errors.deadletterqueue.context.headers.enable=true``), their names,
order and encodings, and the key, value and timestamp kept.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

from airflow_kafka_retry.policy.dead_letters.families import describe_dead_letter
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, create_topics
from testkit.kafka_connect import file_sink_with_dlq

from tests.support.dead_letter_fixtures import read_exactly, unique_name

if TYPE_CHECKING:
    from pathlib import Path

    from confluent_kafka import Message

    from testkit.kafka_connect import ConnectWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Connect's context headers, in the order ``DeadLetterQueueReporter.populateContextHeaders`` adds them.
CONNECT_CONTEXT_HEADERS = [
    "__connect.errors.topic",
    "__connect.errors.partition",
    "__connect.errors.offset",
    "__connect.errors.connector.name",
    "__connect.errors.task.id",
    "__connect.errors.stage",
    "__connect.errors.class.name",
    "__connect.errors.exception.class.name",
    "__connect.errors.exception.message",
    "__connect.errors.exception.stacktrace",
]
SOURCE_TIMESTAMP = 1_600_000_000_000


def _source_headers(i: int) -> list[tuple[str, bytes]]:
    return [("trace-id", f"t{i}".encode()), ("bin", i.to_bytes(4, "big"))]


def _produce(bootstrap: str, topic: str) -> dict[int, Message]:
    """Six records on two partitions; the odd ones' values are not JSON. By record number."""
    placed: dict[int, Message] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        placed[int((msg.key() or b"k-1")[1:])] = msg

    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for i in range(6):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=b'{"n": %d}' % i if i % 2 == 0 else b"not json %d" % i,
            partition=(i // 2) % 2,
            timestamp=SOURCE_TIMESTAMP + i,
            headers=_source_headers(i),
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    assert len(placed) == 6
    return placed


def _run_connector(worker: ConnectWorker, tmp_path: Path, *, context_headers: bool) -> tuple[str, str, dict]:
    bootstrap = worker.bootstrap
    source = create_topics(bootstrap, [unique_name("payments")], partitions=2)[0]
    placed = _produce(bootstrap, source)
    name, dlq = unique_name("sink"), unique_name("payments-dlq")
    config = file_sink_with_dlq(
        topic=source, file=tmp_path / f"{name}.txt", dlq_topic=dlq, context_headers=context_headers
    )
    worker.put_connector(name, config)
    return name, dlq, placed


def _source_part(letter: Message, sent: Message) -> None:
    """What Connect keeps of the source record: key, value, timestamp, and its headers first, as they were."""
    assert letter.key() == sent.key()
    assert letter.value() == sent.value()
    assert letter.timestamp() == (TIMESTAMP_CREATE_TIME, sent.timestamp()[1])
    assert (letter.headers() or [])[:2] == _source_headers(int((sent.key() or b"")[1:]))


def test_context_headers_name_the_source_and_the_failure(
    connect_worker: ConnectWorker, tmp_path: Path
) -> None:
    name, dlq, placed = _run_connector(connect_worker, tmp_path, context_headers=True)
    letters = read_exactly(connect_worker.bootstrap, dlq, 3)
    by_offset = {}
    for letter in letters:
        headers = letter.headers() or []
        assert [key for key, _ in headers[2:]] == CONNECT_CONTEXT_HEADERS, "source headers, then Connect's"
        context = dict(headers[2:])
        by_offset[(int(context["__connect.errors.partition"]), int(context["__connect.errors.offset"]))] = (
            letter,
            context,
        )
    bad = {i: sent for i, sent in placed.items() if i % 2 == 1}
    assert {letter.partition() for letter in letters} == {0}, "Connect's DLQ topic has one partition"
    assert set(by_offset) == {(sent.partition(), sent.offset()) for sent in bad.values()}
    for sent in bad.values():
        letter, context = by_offset[(sent.partition(), sent.offset())]
        _source_part(letter, sent)
        assert context["__connect.errors.topic"] == sent.topic().encode()
        assert context["__connect.errors.partition"] == str(sent.partition()).encode(), "decimal text"
        assert context["__connect.errors.offset"] == str(sent.offset()).encode(), "decimal text"
        assert context["__connect.errors.connector.name"] == name.encode()
        assert context["__connect.errors.task.id"] == b"0"
        assert context["__connect.errors.stage"] == b"VALUE_CONVERTER"
        assert context["__connect.errors.class.name"] == b"org.apache.kafka.connect.json.JsonConverter"
        assert context["__connect.errors.exception.class.name"] == (
            b"org.apache.kafka.connect.errors.DataException"
        )
        assert context["__connect.errors.exception.message"].startswith(b"Converting byte[] to Kafka Connect")
        assert context["__connect.errors.exception.stacktrace"].startswith(
            b"org.apache.kafka.connect.errors.DataException: "
        )


def test_without_context_headers_only_the_source_record(
    connect_worker: ConnectWorker, tmp_path: Path
) -> None:
    """Context headers off (Connect's default): the dead letter carries no coordinates at all."""
    _, dlq, placed = _run_connector(connect_worker, tmp_path, context_headers=False)
    letters = read_exactly(connect_worker.bootstrap, dlq, 3)
    bad = {sent.value(): sent for i, sent in placed.items() if i % 2 == 1}
    assert {letter.value() for letter in letters} == set(bad)
    for letter in letters:
        assert len(letter.headers() or []) == 2, "nothing but the source's own two headers"
        _source_part(letter, bad[letter.value()])


def test_a_transformation_failure_is_read_with_its_stage_and_class(
    connect_worker: ConnectWorker, tmp_path: Path
) -> None:
    """A failing single message transform (Cast) dead-letters at the TRANSFORMATION stage, read as such.

    One connector, three records on one partition: a good one, one whose field the transform cannot cast,
    and one whose value is not JSON (the converter's stage, before the transform runs)."""
    bootstrap = connect_worker.bootstrap
    source = create_topics(bootstrap, [unique_name("payments")], partitions=1)[0]
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER})
    for value in (b'{"n": "7"}', b'{"n": "seven"}', b"not json"):
        producer.produce(source, key=b"k", value=value, timestamp=SOURCE_TIMESTAMP)
    assert producer.flush(30) == 0
    name, dlq = unique_name("sink"), unique_name("payments-dlq")
    config = file_sink_with_dlq(topic=source, file=tmp_path / f"{name}.txt", dlq_topic=dlq)
    config.update(
        {
            "transforms": "cast",
            "transforms.cast.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.cast.spec": "n:int32",
        }
    )
    connect_worker.put_connector(name, config)

    letters = {bytes(m.value() or b""): m for m in read_exactly(bootstrap, dlq, 2)}
    assert set(letters) == {b'{"n": "seven"}', b"not json"}, sorted(letters)
    described = {
        value: describe_dead_letter(m.headers(), m.timestamp()[1], key=m.key(), value=m.value())
        for value, m in letters.items()
    }
    cast = described[b'{"n": "seven"}']
    assert (cast.family, cast.stage, cast.executing_class) == (
        "kafka-connect",
        "TRANSFORMATION",
        "org.apache.kafka.connect.transforms.Cast$Value",
    ), cast
    assert (cast.original_topic, cast.original_partition, cast.original_offset) == (source, 0, 1)
    assert cast.failure_class == "org.apache.kafka.connect.errors.DataException", cast  # Cast's own error
    converter = described[b"not json"]
    assert (converter.stage, converter.original_offset) == ("VALUE_CONVERTER", 2), converter
    assert converter.failure_class == "org.apache.kafka.connect.errors.DataException"
    sink = tmp_path / f"{name}.txt"  # written at the worker's next offset flush (every second here)
    deadline = time.monotonic() + 30
    while not (sink.exists() and sink.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sink.read_text().strip() == "{n=7}", "the good record, cast, reached the sink"
