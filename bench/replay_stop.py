"""
``python -m bench.replay_rate --stop-after S``: a paced replay stopped mid-way, then resumed by its id.

The replay runs in a thread of the bench; ``S`` seconds after it starts, a stop is requested the way
``airflow-kafka-retry dlt replay-stop --wait`` does (:meth:`ReplayStatusView.stop`: a ``stop/<replay id>``
entry in the replay log, then its status read until it says the replay ended). Measured: the seconds from
the request (the moment the stop entry is made, just before it is written) to the replay's return, and to
the status saying ``stopped`` (and from the call, which first reads the replay's status, to the end); the
records moved after the request (committed chunks counted then and at
the end: the target is at most one chunk), and the same from the stop entry's acknowledgement (the
replay reads its log ``read_committed``: an entry appended while one of its chunks' transactions is open
shows once that chunk commits); what the status says. Then the same replay id runs again at the
same rate and moves the rest. The caller reads the copies back and checks each record moved once.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_status import ReplayStatusView
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

REPLAY_ID = "bench-stop"
#: How long the bench waits for the status to say the replay ended (``--wait``), and for its thread.
WAIT_S = 60.0


def stop_and_resume(
    topology: Topology, config: dict[str, Any], rate: float, chunk_size: int, stop_after_s: float
) -> dict[str, Any]:
    """Run, stop after ``stop_after_s``, resume (see the module's docstring); the figures."""
    request = ReplayRequest(to="main")
    first = Replay(topology, config, request, replay_id=REPLAY_ID, rate=rate, chunk_size=chunk_size)
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["summary"] = first.run()
        except Exception as exc:  # reported with the figures
            out["error"] = f"{type(exc).__name__}: {exc}"
        out["ended"] = time.monotonic()

    thread = threading.Thread(target=run, name="bench-replay", daemon=True)
    began = time.monotonic()
    thread.start()
    time.sleep(stop_after_s)
    asked: dict[str, Any] = {}

    def request_clock() -> int:  # called once, as the stop entry is made
        asked["at"] = time.monotonic()
        asked["moved"] = first.summary.moved if first.summary is not None else 0
        return wall_clock_ms()

    class TimedView(ReplayStatusView):
        def _write(self, key: bytes, value: bytes) -> None:
            super()._write(key, value)
            asked["written"] = time.monotonic()
            asked["moved_written"] = first.summary.moved if first.summary is not None else 0

    view = TimedView(topology, config, clock=request_clock)
    called = time.monotonic()
    status = view.stop(REPLAY_ID, reason="bench: stop latency", wait_s=WAIT_S)
    status_seen = time.monotonic()
    thread.join(WAIT_S)
    if thread.is_alive() or "summary" not in out:
        raise RuntimeError(f"the stopped replay did not end cleanly: {out.get('error') or 'still running'}")
    summary = out["summary"]
    moved_after = summary.moved - asked["moved"]

    resumed_at_ms = wall_clock_ms()
    rest_began = time.monotonic()
    rest = Replay(topology, config, request, replay_id=REPLAY_ID, rate=rate, chunk_size=chunk_size).run()
    rest_took = time.monotonic() - rest_began
    (final,) = view.read(REPLAY_ID)
    return {
        "stop_after_s": stop_after_s,
        "stop_requested_after_s": round(asked["at"] - began, 2),
        "moved_at_request": asked["moved"],
        "stop_to_end_s": round(out["ended"] - asked["at"], 3),
        "command_to_end_s": round(out["ended"] - called, 3),
        "stop_to_status_stopped_s": round(status_seen - asked["at"], 3),
        "moved_after_request": moved_after,
        "stop_written_s": round(asked["written"] - asked["at"], 3),
        "written_to_end_s": round(out["ended"] - asked["written"], 3),
        "moved_after_written": summary.moved - asked["moved_written"],
        "within_one_chunk_of_written": summary.moved - asked["moved_written"] <= first.chunk_size,
        "chunk_size": first.chunk_size,
        "within_one_chunk_of_request": moved_after <= first.chunk_size,
        "stopped_run": {
            "status": summary.status,
            "moved": summary.moved,
            "transactions": summary.transactions,
            "reason": summary.error,
        },
        "status_after_stop": {
            k: status.get(k) for k in ("state", "moved", "remaining", "selected", "reason")
        },
        "resumed_run": {
            "status": rest.status,
            "moved_before": rest.moved_before,
            "moved": rest.moved,
            "seconds": round(rest_took, 2),
            "rate": round(rest.moved / rest_took, 1) if rest_took else None,
        },
        "resumed_at_ms": resumed_at_ms,
        "status_at_end": {k: final.get(k) for k in ("state", "moved", "remaining", "measured_rate")},
    }
