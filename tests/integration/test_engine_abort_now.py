"""A stop that must not wait for the chunk (an orphaned task try: the next try is coming) ends it at once.

``should_stop`` returning an :class:`~airflow_kafka_retry.engine.kafka.deadlines.AbortNow` reason stops each
partition's attempt at its next piece or client call instead of at the chunk boundary; the chunk in
progress is never committed (its open transaction, if any, is aborted), so the next run resumes at the
last chunk boundary. In threads of this process and in worker processes (the reason travels as an
``abort`` message).
"""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.deadlines import AbortNow
from airflow_kafka_retry.engine.local.engine import run_local

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS, RECORDS, CHUNK = 2, 200, 50


def _handed(path) -> dict[int, list[int]]:
    offsets: dict[int, list[int]] = defaultdict(list)
    for line in path.read_text().splitlines():
        partition, offset = line.split()
        offsets[int(partition)].append(int(offset))
    return offsets


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_an_abort_now_stop_ends_the_chunk_at_once_and_commits_nothing_of_it(
    kafka_bootstrap, tmp_path, monkeypatch, broker_capabilities, engine
):
    handed = tmp_path / "handed.txt"
    handed.touch()
    monkeypatch.setenv("AKR_HANDED", str(handed))
    monkeypatch.setenv("AKR_SLOW_S", "0.1")  # a batch of 5 takes 0.1 s: a chunk of 50 takes a second
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology(f"abortnow-{engine}")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, RECORDS, PARTITIONS)
    options = DrainOptions(
        handler="tests.support.worker_handler:slow_noted",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=5,
        chunk_size=CHUNK,
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    stop: list[str] = []
    done = threading.Event()

    def orphan_when_inside_the_second_chunks() -> None:  # as the supervisor watch would
        while not done.wait(0.02):
            offsets = _handed(handed)
            if all(max(offsets.get(p, [0])) >= CHUNK + 5 for p in range(PARTITIONS)):
                stop.append(AbortNow("supervisor_gone"))
                return

    watcher = threading.Thread(target=orphan_when_inside_the_second_chunks, daemon=True)
    watcher.start()
    summary = run_local(
        topology,
        topology.tier(0),
        config,
        options,
        parallelism=PARTITIONS,
        in_process=engine == "threads",
        should_stop=lambda: stop[0] if stop else None,
    )
    done.set()
    assert stop, "the run ended before both partitions were inside their second chunk"
    assert summary.stopped == "supervisor_gone", summary.to_dict()
    offsets = _handed(handed)
    for partition in range(PARTITIONS):
        # the chunk in progress (offsets 50 to 99) was not finished: the partition stopped inside it
        assert max(offsets[partition]) < 2 * CHUNK - 1, (partition, max(offsets[partition]))
    group = topology.consumer_group(topology.tier(0))
    assert ledger.committed(kafka_bootstrap, group, topology.topic, PARTITIONS) == {0: CHUNK, 1: CHUNK}

    for tier in topology.tiers:  # the next runs resume at the chunk boundary and finish
        assert run_local(topology, tier, config, options, parallelism=PARTITIONS).ok
    ledger.check_ledger(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=not broker_capabilities.abort_isolation,
        handled_once=False,
    )
