"""
The reference: a plain confluent-kafka loop that consumes, produces the 1 % with a header, commits.

It assigns every partition of the tier (no group join), consumes in batches of 1000, calls
:func:`bench.handler.fate` on each key, produces a failing record to the retry topic or the DLT
with one ``retry_topic-attempts`` header, and commits the batch's offsets asynchronously; at the
end it flushes the producer and commits synchronously. It checks no due time, writes no Spring
headers, isolates nothing and is not transactional: the floor the engines are compared with.

With ``read_headers`` it also calls ``Message.headers()`` on every record (and looks at nothing in
them): the least a due-aware drain must do, in one process -- the single-process limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench.handler import OK, TRANSIENT, fate

if TYPE_CHECKING:
    from bench.workload import Workload


def run_raw_loop(workload: Workload, group: str, *, read_headers: bool = False) -> int:
    """Drain the tier once; returns the number of records read."""
    consumer = Consumer(
        {
            "bootstrap.servers": workload.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    producer = Producer({"bootstrap.servers": workload.bootstrap, "linger.ms": 5})
    consumer.assign([TopicPartition(workload.topic, p) for p in range(workload.partitions)])
    attempts = [("retry_topic-attempts", (3).to_bytes(4, "big"))]
    done: set[int] = set()
    count = 0
    try:
        while len(done) < workload.partitions:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done.add(msg.partition())
                        continue
                    raise RuntimeError(f"raw loop: {error}")
                count += 1
                if read_headers:
                    msg.headers()
                outcome = fate(msg.key())
                if outcome != OK:
                    topic = workload.retry_topic if outcome == TRANSIENT else workload.dlt_topic
                    producer.produce(
                        topic, value=msg.value(), key=msg.key(), headers=attempts, partition=msg.partition()
                    )
            producer.poll(0)
            consumer.commit(asynchronous=True)
        if producer.flush(60):
            raise RuntimeError("raw loop: records left unacknowledged")
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:  # the last async commit already stored it all
                raise
    finally:
        consumer.close()
    return count
