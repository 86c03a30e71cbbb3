"""Case 23: a paced DLT replay stopped from the CLI while its broker is down (issue 51).

The test's own single-node Apache Kafka (``own_broker``) is frozen (SIGSTOP, SIGCONT ``FREEZE_S`` later)
while a replay at 50/s runs in a thread; ``dlt replay-stop --wait`` is run during the freeze. The stop
request waits for the broker (it is written within ``STOP_TIMEOUT_S``), the replay honours it at a chunk
boundary once the broker is back, its status says ``stopped`` and how many moved, nothing is half-moved,
and the same replay id then moves each of the rest once (``read_committed``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_status import STOP_TIMEOUT_S, ReplayStatusView

from tests.integration.test_replay_rate_stop import COUNT, _copies, _fill, _in_thread, _wait_for_moves
from tests.support.ledger import Account

FREEZE_S = 5.0


@pytest.mark.fault_case(
    "23",
    f"the broker (one node) SIGSTOPped for {FREEZE_S:g}s while a DLT replay at 50/s (chunks of 10) runs; "
    "`dlt replay-stop --wait 30` asked during the freeze",
)
def test_a_replay_stopped_while_its_broker_is_down_stops_cleanly_and_resumes_once(
    own_broker, tmp_path, capsys, fault_result
):
    assert FREEZE_S < STOP_TIMEOUT_S  # the request waits for the broker rather than failing
    bootstrap = own_broker.bootstrap
    topology, config = _fill(bootstrap, tmp_path, "stop-down")
    request = ReplayRequest(to="main")
    first = Replay(topology, config, request, replay_id="down-1", rate="50/s", chunk_size=10)
    thread, out = _in_thread(first)
    _wait_for_moves(ReplayStatusView(topology, config), "down-1", thread)

    os.killpg(own_broker.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    thaw = threading.Timer(FREEZE_S, os.killpg, (own_broker.pid, signal.SIGCONT))
    thaw.start()
    try:
        code = main(
            ["dlt", "replay-stop", "--topology", str(tmp_path / "topology.yaml"), "--replay-id", "down-1"]
            + ["--reason", "broker down", "--wait", "30", "--json", "--bootstrap", bootstrap]
        )
        answered = time.monotonic() - frozen_at
        thread.join(60)
    finally:
        thaw.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(own_broker.pid, signal.SIGCONT)
    assert code == 0, capsys.readouterr().err
    stopped = json.loads(capsys.readouterr().out)
    assert not thread.is_alive(), "the replay did not end"
    assert "summary" in out, out.get("error")
    summary = out["summary"]
    assert (summary.status, stopped["state"]) == ("stopped", "stopped"), stopped
    assert "broker down" in stopped["reason"]
    moved = summary.moved
    assert 0 < moved < COUNT
    assert moved % first.chunk_size == 0, "a stop ends the replay at a chunk boundary"
    assert (stopped["moved"], stopped["remaining"]) == (moved, COUNT - moved)
    assert sum(_copies(bootstrap, topology.topic).values()) == moved, "nothing half-moved"

    rest = Replay(topology, config, request, replay_id="down-1", chunk_size=100).run()
    assert (rest.status, rest.moved_before, rest.moved) == ("ok", moved, COUNT - moved)
    copies = _copies(bootstrap, topology.topic)
    assert copies == Counter(str(i) for i in range(COUNT)), "lost or duplicated records"
    (done,) = ReplayStatusView(topology, config).read("down-1")
    assert (done["state"], done["moved"], done["remaining"]) == ("done", COUNT, 0)

    retried = f"{first.retries} attempt(s) tried again" if first.retries else "no attempt tried again"
    fault_result(
        "the stop request was written once the broker was back; "
        f"`replay-stop` answered {answered:.1f}s after the freeze: "
        f"stopped at a chunk boundary after {moved} move(s) ({retried}), "
        f"its status said stopped, moved {moved}, remaining {COUNT - moved}; "
        f"the same replay id moved the other {COUNT - moved} once",
        Account(COUNT, 0, COUNT, 0, {}, 0),
    )
