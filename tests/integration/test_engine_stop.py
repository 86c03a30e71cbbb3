"""Stopping a run at a chunk boundary: a deadline (a reprocessing window closing, ``max_run``) or
``should_stop``.

The clock the engine sees is injected and moved forward by the handler, so "the window closes after
the fourth batch" is exact. The real broker then shows that the stop committed exactly the chunks
that finished: the group's offset, the records routed on and the processed ledger all end at the
same chunk boundary, and the next run picks up the rest.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger, stop_handler

pytestmark = [pytest.mark.integration]

STOP_MODULE = "tests.support.stop_handler"
T0 = 1_767_261_480_000  # 2026-01-01T09:58:00Z
STRAIGHT_TO_DLT = ("fatal", "bad-json")  # from the main topic; "permanent" goes around the tiers first
STEP_MS = 10_000  # the clock moves 10 s per record read (see stop_handler.advancing)


def _ids_at_offsets(inputs: ledger.Inputs, partition: int, below: int, *, modes: tuple[str, ...]) -> set[str]:
    return {
        rid
        for rid, (mode, p, offset) in inputs.records.items()
        if p == partition and offset < below and mode in modes
    }


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, as the broker reports it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("ends")})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _check_boundary(bootstrap, topology, inputs, ledger_file, partition: int, boundary: int) -> None:
    """Everything before ``boundary`` has its home, nothing at or after it was touched."""
    tier0, tier1 = topology.tier(0), topology.tier(1)
    group = topology.consumer_group(tier0)
    assert ledger.committed(bootstrap, group, topology.topic, partition + 1)[partition] == boundary
    processed = set(ledger.processed_ids(ledger_file))
    assert processed == _ids_at_offsets(inputs, partition, boundary, modes=("ok",))
    routed = {m.key().decode() for m in ledger.read_all(bootstrap, tier1.topic) if m.partition() == partition}
    assert routed == _ids_at_offsets(inputs, partition, boundary, modes=ledger.RETRIED_MODES)
    dead = {
        m.key().decode() for m in ledger.read_all(bootstrap, topology.dlt_topic) if m.partition() == partition
    }
    assert dead == _ids_at_offsets(inputs, partition, boundary, modes=STRAIGHT_TO_DLT)


def test_a_window_closing_mid_run_stops_at_a_chunk_boundary(kafka_bootstrap, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("stopdl")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 70, 1)
    config = {"bootstrap.servers": kafka_bootstrap}
    # the window closes at 10:00 = T0 + 12 steps: after chunk 1 (offsets 0-9) the clock is at most
    # T0 + 10 steps, after chunk 2 (10-19) T0 + 19 steps (offset 19 is bad JSON, never handed to the handler)
    closes = ReprocessWindow.parse("09:00-10:00", "UTC").closes_at_ms(T0)
    assert closes == T0 + 12 * STEP_MS
    options = DrainOptions(
        handler=f"{STOP_MODULE}:advancing",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=5,
        chunk_size=10,
        deadline_ms=closes,
    )
    stop_handler.reset(T0, STEP_MS)

    summary = run_local(topology, topology.tier(0), config, options, cutoff_ms=T0, clock=stop_handler.now_ms)

    assert summary.ok
    assert summary.stopped == "deadline"
    [part] = summary.partitions
    assert (part.stop_reason, part.stopped_by) == ("stopped", "deadline")
    assert part.drained == 20
    assert part.committed_offset == 20
    assert part.transactions == 2
    assert part.left == 50, "the rest of the partition is reported as left for the next run"
    assert stop_handler.CLOCK[0] == T0 + 19 * STEP_MS, "a record after the boundary reached the handler"
    _check_boundary(kafka_bootstrap, topology, inputs, ledger_file, 0, 20)
    totals = summary.to_dict()["totals"]
    assert totals["dlt_topics"] == {
        topology.dlt_topic: len(_ids_at_offsets(inputs, 0, 20, modes=STRAIGHT_TO_DLT))
    }

    # a run that starts after the window closed reads nothing and moves nothing
    again = run_local(topology, topology.tier(0), config, options, cutoff_ms=T0, clock=stop_handler.now_ms)
    assert again.stopped == "deadline"
    assert again.partitions[0].drained == 0
    assert again.partitions[0].committed_offset is None
    assert again.partitions[0].start_offset == 20
    _check_boundary(kafka_bootstrap, topology, inputs, ledger_file, 0, 20)

    # the next window's run drains the rest; then every record has exactly one home
    later = DrainOptions(**{**options.to_dict(), "deadline_ms": None})
    rest = run_local(topology, topology.tier(0), config, later, cutoff_ms=T0, clock=stop_handler.now_ms)
    assert rest.stopped is None
    assert rest.partitions[0].drained == 50
    assert rest.partitions[0].stop_reason == "end"
    for tier in topology.tiers[1:]:
        assert run_local(topology, tier, config, later, clock=stop_handler.now_ms).ok
    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, 1)


@pytest.mark.parametrize("in_process", [True, False], ids=["threads", "worker-processes"])
def test_should_stop_stops_every_partition_at_its_next_chunk_boundary(
    kafka_bootstrap, tmp_path, monkeypatch, in_process
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("stopkill")
    partitions = 2
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, 120, partitions)
    config = {"bootstrap.servers": kafka_bootstrap}
    # in worker processes the handler's state is theirs: the test watches the processed ledger instead,
    # and the handler pauses per batch so that the stop reaches the workers mid-run. The ledger holds
    # only the records that succeeded, 2 in 7 (ledger.MODES): 8 of them is about 28 records handled, as
    # 25 seen in threads, so each partition still has about 45 of its 60 records to go (a second and more
    # of pauses: failed batches are split and redelivered). At 25 of them the stop could come too late.
    monkeypatch.setenv("AKR_SLOW_S", "0.05")
    handler = f"{STOP_MODULE}:counting" if in_process else f"{ledger.HANDLER_MODULE}:slow_indexed"
    options = DrainOptions(
        handler=handler, value_deserializer=f"{ledger.HANDLER_MODULE}:decode", batch_size=5, chunk_size=10
    )
    stop_handler.reset(0, 0)
    asked = threading.Event()
    stop_at = 25 if in_process else 8

    def handled() -> int:
        return len(stop_handler.SEEN) if in_process else sum(ledger.processed_ids(ledger_file).values())

    def should_stop() -> str | None:
        # "killed" once stop_at records were handled (anywhere); each partition finishes its chunk
        if handled() >= stop_at:
            asked.set()
            return "killed"
        return None

    summary = run_local(
        topology,
        topology.tier(0),
        config,
        options,
        parallelism=partitions,
        should_stop=should_stop,
        in_process=in_process,
    )

    assert asked.is_set()
    assert summary.ok
    assert summary.stopped == "killed"
    by_partition = {p.partition: p for p in summary.partitions}
    for number, part in by_partition.items():
        assert part.stop_reason == "stopped", part
        assert part.stopped_by == "killed", part
        assert part.drained % options.chunk_size == 0, f"partition {number} stopped inside a chunk: {part}"
        assert part.drained < 60, f"partition {number} was not stopped: {part}"
        boundary = part.committed_offset if part.committed_offset is not None else 0
        assert boundary == part.drained
    # the ledger and the routed records end exactly at each partition's boundary
    tier0 = topology.tier(0)
    committed = ledger.committed(kafka_bootstrap, topology.consumer_group(tier0), topology.topic, partitions)
    for number, part in by_partition.items():
        assert committed[number] == (part.committed_offset if part.committed_offset is not None else -1001)
    processed = set(ledger.processed_ids(ledger_file))
    expected_ok = set().union(
        *(_ids_at_offsets(inputs, n, p.drained, modes=("ok",)) for n, p in by_partition.items())
    )
    assert processed == expected_ok
    if in_process:  # every record handed to the handler before the stop is in a chunk that was committed
        assert {(n, o) for n, p in by_partition.items() for o in range(p.drained)} >= stop_handler.SEEN
    # the stop left records undrained on every partition: the broker's end offsets, past each boundary
    ends = _end_offsets(kafka_bootstrap, topology.topic, partitions)
    for number, part in by_partition.items():
        assert ends[number] == 60
        assert ends[number] - part.drained > 0, f"partition {number} drained to its end: {part}"
        if part.left is not None:  # the summary's own count, where the engine reports one
            assert part.left == ends[number] - part.drained, part
    # then a run without a stop finishes the path with every record in exactly one home
    for tier in topology.tiers:
        assert run_local(topology, tier, config, options, parallelism=partitions).ok
    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, partitions)
