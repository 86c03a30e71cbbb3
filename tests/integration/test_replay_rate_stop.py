"""
A replay's rate, status, stop and resume on real Kafka (issue 51).

The DLT is filled directly (a few hundred records, two partitions) and replayed to the main topic. What is
asserted: a paced run takes at least ``count / rate - 1`` seconds (a lower bound, not a speed target; the
pacing itself is asserted with an injected clock in ``tests/unit/test_replay_pacing.py``); a stop asked
from the CLI while a replay runs in another thread ends it at a chunk boundary with its status saying so;
the same replay id resumes it; every record is moved exactly once (``read_committed``); and two runs of
one DLT at once (the same replay id, or another): the second fences the first, which fails saying so and
what to do (its status too), and nothing moves twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_status import ReplayStatusView
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import replay as R

from tests.support import ledger

pytestmark = [pytest.mark.integration]

COUNT, PARTITIONS = 300, 2


def _fill(bootstrap: str, tmp_path, prefix: str):
    """A topology (and its YAML file) whose DLT holds COUNT records keyed 0..COUNT-1."""
    topology = ledger.write_topology(ledger.make_topology(prefix), tmp_path / "topology.yaml")
    config = {"bootstrap.servers": bootstrap}
    ensure_topics(topology, config, partitions=PARTITIONS)
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
    for i in range(COUNT):
        producer.produce(topology.dlt_topic, key=str(i).encode(), value=b"{}", partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return topology, config


def _copies(bootstrap: str, topic: str) -> Counter:
    """How many times each key was replayed to ``topic`` (read_committed)."""
    return Counter(m.key().decode() for m in ledger.read_all(bootstrap, topic) if R.is_replayed(m.headers()))


def _in_thread(replay: Replay) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["summary"] = replay.run()
        except Exception as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _wait_for_moves(view: ReplayStatusView, replay_id: str, thread: threading.Thread) -> dict:
    """The replay's status once it says some records moved (the replay runs in ``thread``)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and thread.is_alive():
        found = {s["replay_id"]: s for s in view.read()}
        if found.get(replay_id, {}).get("moved_this_run"):
            return found[replay_id]
        time.sleep(0.2)
    raise AssertionError(f"replay {replay_id} moved nothing while it ran")


def test_a_paced_replay_stopped_from_the_cli_resumes_and_moves_each_record_once(
    kafka_bootstrap, tmp_path, capsys
):
    topology, config = _fill(kafka_bootstrap, tmp_path, "rate-stop")
    file = str(tmp_path / "topology.yaml")
    request = ReplayRequest(to="main")
    first = Replay(topology, config, request, replay_id="paced-1", rate="100/s", chunk_size=500)
    assert first.chunk_size == 25  # a transaction holds at most a quarter of a second's worth
    first = Replay(topology, config, request, replay_id="paced-1", rate="100/s", chunk_size=20)
    view = ReplayStatusView(topology, config)
    thread, out = _in_thread(first)
    running = _wait_for_moves(view, "paced-1", thread)
    assert running["state"] == "running"
    assert running["rate"] == 100.0
    assert running["started_by"]["user"]
    assert running["started_by"]["host"]

    code = main(
        ["dlt", "replay-stop", "--topology", file, "--replay-id", "paced-1", "--reason", "service overloaded"]
        + ["--wait", "10", "--json", "--bootstrap", kafka_bootstrap]
    )
    thread.join(30)
    assert code == 0, capsys.readouterr().err
    stopped = json.loads(capsys.readouterr().out)
    summary = out["summary"]
    assert (summary.status, stopped["state"]) == ("stopped", "stopped")
    assert "service overloaded" in stopped["reason"]
    moved = summary.moved
    assert 0 < moved < COUNT
    assert moved % 20 == 0, "a stop ends the replay at a chunk boundary"
    assert (stopped["moved"], stopped["remaining"], stopped["selected"]) == (moved, COUNT - moved, COUNT)
    assert stopped["ended_ms"] >= stopped["run_started_ms"]
    assert stopped["stop_requested"] is None
    assert sum(_copies(kafka_bootstrap, topology.topic).values()) == moved, "nothing half-moved"
    assert (
        main(
            [
                "dlt",
                "replay-stop",
                "--topology",
                file,
                "--replay-id",
                "paced-1",
                "--bootstrap",
                kafka_bootstrap,
            ]
        )
        == 2
    )
    assert "not running (its status says stopped)" in capsys.readouterr().err

    began = time.monotonic()
    rest = Replay(topology, config, request, replay_id="paced-1", rate="200/s", chunk_size=50).run()
    took = time.monotonic() - began
    assert (rest.status, rest.moved_before, rest.moved) == ("ok", moved, COUNT - moved)
    assert took >= (COUNT - moved) / 200 - 1, "the rate was not held"
    copies = _copies(kafka_bootstrap, topology.topic)
    assert copies == Counter(str(i) for i in range(COUNT)), "lost or duplicated records"

    assert (
        main(
            ["dlt", "replay-status", "--topology", file, "--replay-id", "paced-1", "--json"]
            + ["--bootstrap", kafka_bootstrap]
        )
        == 0
    )
    done = json.loads(capsys.readouterr().out)
    assert (done["state"], done["moved"], done["remaining"], done["moved_this_run"]) == (
        "done",
        COUNT,
        0,
        COUNT - moved,
    )
    assert done["rate"] == 200.0
    assert done["measured_rate"]
    assert done["measured_rate"] > 0  # measured, not set: no speed target here (bench/replay_rate.py)


@pytest.mark.parametrize("second_id", ["twice", "other"], ids=["same-id", "another-id"])
def test_two_runs_of_one_dlt_at_once_the_second_fences_the_first(kafka_bootstrap, tmp_path, second_id):
    topology, config = _fill(kafka_bootstrap, tmp_path, "rate-fence")
    request = ReplayRequest(to="main")
    slow = Replay(topology, config, request, replay_id="twice", rate="50/s", chunk_size=10, broker_retry_s=0)
    thread, out = _in_thread(slow)
    _wait_for_moves(ReplayStatusView(topology, config), "twice", thread)
    second = Replay(topology, config, request, replay_id=second_id, chunk_size=50).run()
    thread.join(30)
    assert isinstance(out.get("error"), ReplayAbortedError), out
    assert "fenced by another replay of the same DLT" in str(out["error"])
    assert "rerun with the same replay id to finish" in str(out["error"])
    assert second.status == "ok"
    # the same id resumes the first's moves; another id skips them (in the log: already replayed)
    before = second.moved_before if second_id == "twice" else second.already_replayed
    assert before + second.moved == COUNT
    assert _copies(kafka_bootstrap, topology.topic) == Counter(str(i) for i in range(COUNT))
    found = {s["replay_id"]: s for s in ReplayStatusView(topology, config).read()}
    assert (found[second_id]["state"], found[second_id]["remaining"]) == ("done", 0)
    if second_id != "twice":  # the fenced replay's status says so, and what to do
        fenced = found["twice"]
        assert fenced["state"] == "failed", fenced
        assert f"fenced by replay {second_id} of the same DLT" in fenced["reason"]
        assert "rerun replay id twice to finish it" in fenced["reason"]
        assert found[second_id]["moved"] + fenced["moved"] == COUNT
