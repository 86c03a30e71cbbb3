"""A replay whose task outlived its supervisor stops at once: its chunk in progress is aborted, not finished.

``Replay(stop_now=...)`` (what ``ReplayDltOperator`` passes its supervisor watch's reason to) ends the
replay at its next call or chunk, aborts the open transaction, and raises ``ReplayAbortedError``; what
earlier chunks moved stays moved and logged, and a rerun of the same replay id moves the rest, each
record once.
"""

from __future__ import annotations

import time

import pytest

from airflow_kafka_retry.dlt import replay_moves
from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.policy.headers.codec import last_header
from airflow_kafka_retry.policy.headers.replay import REPLAY_ID

from tests.faults.helpers import options, run_all_tiers
from tests.support import ledger
from tests.support.ledger import FaultInput

pytestmark = [pytest.mark.integration]

RECORDS, CHUNK = 30, 5


def _copies(bootstrap: str, topic: str) -> list[str]:
    """The fault ids of the replayed copies in ``topic`` (read_committed)."""
    return [
        ledger._fault_id(m) for m in ledger.read_all(bootstrap, topic) if last_header(m.headers(), REPLAY_ID)
    ]


def test_a_replay_stopped_at_once_aborts_its_chunk_and_a_rerun_finishes_exactly_once(
    kafka_bootstrap, tmp_path, monkeypatch, broker_capabilities
):
    if not broker_capabilities.abort_isolation:
        pytest.skip("needs a broker that hides aborted records from read_committed consumers")
    ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("replay-stop")
    inputs = ledger.produce_fault_inputs(kafka_bootstrap, topology, [FaultInput("fatal")] * RECORDS, 2)
    config = {"bootstrap.servers": kafka_bootstrap}
    run_all_tiers(topology, config, options(chunk_size=10))
    stop: list[str] = []
    original_key, entries = replay_moves.record_key, [0]

    def key_of_log_entry(partition: int, offset: int) -> bytes:
        entries[0] += 1
        if entries[0] == CHUNK + 2:  # inside the 2nd chunk's transaction, its copies acknowledged
            stop.append("the task's supervisor is gone")
            time.sleep(0.6)  # the replay's watch looks every 0.2 s
        return original_key(partition, offset)

    monkeypatch.setattr(replay_moves, "record_key", key_of_log_entry)
    replay = Replay(
        topology, config, ReplayRequest(), chunk_size=CHUNK, stop_now=lambda: stop[0] if stop else None
    )
    with pytest.raises(ReplayAbortedError, match="stopped at once") as raised:
        replay.run()
    assert "its chunk in progress was aborted" in str(raised.value)
    moved_first = _copies(kafka_bootstrap, topology.topic)
    assert len(moved_first) == CHUNK  # the first chunk only: the second was aborted, never committed

    monkeypatch.setattr(replay_moves, "record_key", original_key)
    again = Replay(topology, config, ReplayRequest(), chunk_size=CHUNK, replay_id=replay.replay_id).run()
    assert (again.moved_before, again.moved) == (CHUNK, RECORDS - CHUNK)
    assert sorted(_copies(kafka_bootstrap, topology.topic)) == sorted(inputs.records)  # each once
