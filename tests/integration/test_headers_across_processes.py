"""Retry headers written by one OS process come back intact, and decode the same, in another."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_kafka_retry.policy.headers import codec as H

from tests.support.ledger import read_all

pytestmark = [pytest.mark.integration]

WRITER = textwrap.dedent("""
    import json, sys
    from confluent_kafka import Producer
    from airflow_kafka_retry.policy.headers import failure as F, codec as H
    from airflow_kafka_retry.policy.headers.header_policy import HeaderPolicy

    bootstrap, topic = sys.argv[1], sys.argv[2]
    try:
        raise KeyError("sku-42")
    except KeyError as inner:
        try:
            raise RuntimeError("inventory lookup failed") from inner
        except RuntimeError as exc:
            info = F.describe_exception(exc)
    failure = F.Failure(topic="orders", partition=0, offset=4242, timestamp_ms=1_700_000_000_000,
    timestamp_type=1,
                        consumer_group="orders-service", next_attempt=3, due_ms=1_700_000_060_000,
                        exception=info)
    previous = [("trace-id", b"abc"), (H.ATTEMPTS, bytes([2])), ("kafka_exception-fqcn", b"old.Error")]
    headers = F.forward_headers(previous, failure, HeaderPolicy(max_header_bytes=4096))
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"payload", key=b"k", partition=0, headers=headers)
    assert producer.flush(10) == 0
    print(json.dumps([[k, v.hex() if v is not None else None] for k, v in headers]))
""")


def test_headers_written_in_one_process_read_back_in_another(kafka_bootstrap, new_topic):
    topic = new_topic("headers")
    done = subprocess.run(
        [sys.executable, "-c", WRITER, kafka_bootstrap, topic],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = [(k, bytes.fromhex(v) if v is not None else None) for k, v in json.loads(done.stdout)]

    [record] = read_all(kafka_bootstrap, topic)
    assert record.headers() == written  # byte for byte, same order, repeated names kept
    headers = record.headers()
    assert H.last_header(headers, H.ATTEMPTS) == b"\x00\x00\x00\x03"
    assert H.read_attempts(headers) == 3
    assert H.read_due_ms(headers) == 1_700_000_060_000
    assert H.last_header(headers, H.BACKOFF_TIMESTAMP) == bytes.fromhex("018bcfe65260")
    assert H.last_header(headers, H.ORIGINAL_TIMESTAMP) == bytes.fromhex("018bcfe56800")
    coords = H.read_original_coordinates(headers)
    assert (
        coords.topic,
        coords.partition,
        coords.offset,
        coords.timestamp_ms,
        coords.timestamp_type,
        coords.consumer_group,
    ) == ("orders", 0, 4242, 1_700_000_000_000, "CreateTime", "orders-service")
    assert H.last_header(headers, "kafka_original-offset") == bytes.fromhex("0000000000001092")
    assert H.last_header(headers, "kafka_exception-fqcn") == b"RuntimeError"
    assert H.last_header(headers, "kafka_exception-cause-fqcn") == b"KeyError"
    assert H.last_header(headers, "kafka_exception-message") == b"inventory lookup failed"
    assert b"KeyError: 'sku-42'" in H.last_header(headers, "kafka_exception-stacktrace")
    assert [k for k, _ in headers].count("kafka_exception-fqcn") == 1
    assert H.last_header(headers, "trace-id") == b"abc"
    assert sum(len(k) + len(v or b"") for k, v in headers) <= 4096
