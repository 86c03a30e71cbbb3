"""A replay's rate (``--rate``), its pacing against an injected clock, and its status and stop entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.replay_status import status_lines, statuses
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, status_key, stop_key
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.timing.pacing import (
    Pacer,
    PastDeadline,
    measured_rate,
    paced_chunk,
    parse_rate,
)

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"
NOWHERE = "127.0.0.1:9"  # nothing listens: a test that reached Kafka would time out, not pass


class FakeClock:
    """Monotonic seconds that move only when slept."""

    def __init__(self) -> None:
        self.now, self.slept = 100.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(("given", "rate"), [("200/s", 200.0), ("200", 200.0), (" 12.5/s ", 12.5), (3, 3.0)])
def test_rates_accepted(given, rate):
    assert parse_rate(given) == rate


@pytest.mark.parametrize("given", [None, "", "None"])
def test_no_rate(given):
    assert parse_rate(given) is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("0", "above 0"),
        ("0/s", "above 0"),
        ("-5/s", "above 0"),
        (-1, "above 0"),
        ("fast", "is not a rate"),
        ("200/m", "is not a rate"),
        ("nan", "above 0"),
        (True, "records per second"),
    ],
)
def test_bad_rates_refused_naming_the_option(given, message):
    with pytest.raises(ReplayError, match=message) as raised:
        parse_rate(given, "rate")
    assert str(raised.value).startswith("rate ")


@pytest.mark.parametrize("rate", ["0", "-3", "lots"])
def test_replay_cli_refuses_a_bad_rate_before_any_kafka_client(capsys, rate):
    code = main(["dlt", "replay", "--topology", str(EXAMPLE), "--bootstrap", NOWHERE, "--rate", rate])
    assert code == 2
    assert f"--rate {rate!r}" in capsys.readouterr().err


def test_operator_rate_is_templated():
    op = ReplayDltOperator(task_id="t", topology="t.yaml", rate="{{ params.rate }}")
    assert "rate" in op.template_fields


def test_chunk_holds_a_quarter_of_a_seconds_worth():
    assert paced_chunk(100, None) == 100
    assert paced_chunk(100, 1000.0) == 100
    assert paced_chunk(100, 200.0) == 50
    assert paced_chunk(100, 50.0) == 12
    assert paced_chunk(100, 0.5) == 1
    assert measured_rate(100, 0.05) is None
    assert measured_rate(100, 2.0) == 50.0


def test_pacer_holds_the_rate_chunk_by_chunk():
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)
    checks = []
    starts = []
    moved = 0
    for _ in range(5):  # chunks of 5 at 10/s: one chunk every 0.5 s
        pacer.wait(moved, lambda: checks.append(clock.now))
        starts.append(round(clock.now - 100.0, 6))
        moved += 5
    assert starts == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert all(s <= 0.2 + 1e-9 for s in clock.slept), "a wait is sliced so a stop at once is seen"
    assert checks, "each slice of a wait checks for a stop first"
    assert pacer.elapsed() == pytest.approx(2.0)


def test_a_stall_is_made_up_for_by_a_quarter_seconds_worth_never_a_burst():
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)
    pacer.wait(0)
    clock.now += 3.0  # the first chunk (5 moves, due 0.5 s later) took 3 s: a broker stalled
    assert pacer.wait(5) == 0.0  # late: begins at once
    clock.slept.clear()
    # without forgiving the lag, moves 5 to 30 would all be due at once (a burst of 25 at full speed);
    # the run catches up a quarter second's worth (2.5 moves), then holds the rate again
    assert pacer.wait(10) == pytest.approx(0.25)
    assert pacer.wait(15) == pytest.approx(0.5)
    assert pacer.elapsed() == pytest.approx(3.75), "elapsed counts from the first move, stall included"


def test_a_chunk_a_little_late_is_caught_up():
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)
    pacer.wait(0)
    clock.now += 0.7  # 0.2 s late for the next chunk: within the quarter second, kept
    assert pacer.wait(5) == 0.0
    assert pacer.wait(10) == pytest.approx(0.3)  # due at 1.0 s, as scheduled from the first move


def test_no_rate_never_waits():
    clock = FakeClock()
    pacer = Pacer(None, clock=clock, sleep=clock.sleep)
    assert [pacer.wait(n) for n in (0, 1000, 10**6)] == [0.0, 0.0, 0.0]
    assert clock.slept == []


def test_pacer_never_sleeps_past_the_runs_deadline():
    clock = FakeClock()
    pacer = Pacer(1.0, deadline=102.5, clock=clock, sleep=clock.sleep)
    pacer.wait(0)
    pacer.wait(2)  # due at 102.0
    with pytest.raises(PastDeadline, match="after the run's deadline"):
        pacer.wait(3)  # due at 103.0
    assert clock.now == 102.0, "it raised at once instead of sleeping"


def test_a_stop_at_once_ends_the_wait():
    clock = FakeClock()
    pacer = Pacer(1.0, clock=clock, sleep=clock.sleep)
    pacer.wait(0)

    def stop() -> None:
        if clock.now >= 100.4:
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        pacer.wait(10, stop)
    assert clock.now < 101.0


def _log(*entries: tuple[bytes, dict | None]) -> ReplayLog:
    log = ReplayLog("orders-dlt-replay-log")
    for key, value in entries:
        log.add(key, encode_entry(value) if value is not None else None)
    return log


def test_status_and_stop_entries_in_the_replay_log():
    running = {"replay_id": "r1", "state": "running", "moved": 3, "started_ms": 2, "dlt": "orders-dlt"}
    log = _log(
        (b"plan/r0", {"replay_id": "r0", "request": {}, "started_ms": 1, "ends": {}}),
        (b"record/0/5", {"replay_id": "r0"}),
        (b"plan/r1", {"replay_id": "r1", "request": {}, "started_ms": 2, "ends": {}}),
        (status_key("r1"), running),
        (stop_key("r1"), {"replay_id": "r1", "requested_by": {"user": "ann", "host": "h"}, "at_ms": 9}),
        (b"future-kind/x", {"anything": 1}),  # a kind this version does not know is ignored
    )
    found = statuses(log)
    assert list(found) == ["r0", "r1"]
    assert found["r0"]["state"] == "unfinished"
    assert found["r0"]["moved"] == 1
    assert found["r1"]["state"] == "running"
    assert found["r1"]["stop_requested"]["requested_by"]["user"] == "ann"
    text = "\n".join(status_lines(found["r1"]))
    assert "replay r1 of orders-dlt: running" in text
    assert "stop requested" in text
    log.add(stop_key("r1"), None)  # the run honoured it (or a new run of r1 cleared it)
    assert statuses(log)["r1"]["stop_requested"] is None


def _summary():
    from airflow_kafka_retry.dlt.summary import ReplaySummary

    summary = ReplaySummary("r1", "t.yaml", "orders-dlt", "orders-dlt-replay-log", False, {}, "main", None, 1)
    summary.selected, summary.moved_before, summary.moved = 100, 30, 20
    summary.already_replayed, summary.left_out, summary.not_replayable = 2, 1, 1
    return summary


def _control(clock: FakeClock, **kwargs):
    from airflow_kafka_retry.dlt.replay_control import RunControl

    pacer = Pacer(10.0, clock=clock, sleep=clock.sleep)
    return RunControl("r1", "orders-dlt-replay-log", {"replay_id": "r1"}, pacer, lambda: 5000, 4000, **kwargs)


def test_a_run_marks_the_replays_it_fenced_failed_naming_what_to_do():
    import json

    log = _log(
        (status_key("r0"), {"replay_id": "r0", "state": "running", "moved": 7}),
        (status_key("old"), {"replay_id": "old", "state": "done", "moved": 9}),
        (status_key("r1"), {"replay_id": "r1", "state": "stopped", "moved": 30}),
    )
    entries = dict(_control(FakeClock(), replay_log=log).start_entries(_summary()))
    assert json.loads(entries[status_key("r1")])["state"] == "running"
    assert entries[stop_key("r1")] is None
    fenced = json.loads(entries[status_key("r0")])
    assert (fenced["state"], fenced["moved"], fenced["ended_ms"]) == ("failed", 7, 5000)
    assert "fenced by replay r1 of the same DLT" in fenced["reason"]
    assert "rerun replay id r0 to finish it" in fenced["reason"]
    assert status_key("old") not in entries, "an ended replay's status is left as it is"


def test_status_entry_counts_what_is_committed_with_the_chunk():
    import json

    clock = FakeClock()
    control = _control(clock)
    control.pacer.wait(0)
    clock.now += 2.0
    key, value = control.progress(_summary(), pending=10)
    entry = json.loads(value)
    assert key == b"status/r1"
    assert (entry["state"], entry["moved"], entry["moved_this_run"], entry["remaining"]) == (
        "running",
        60,
        30,
        40,
    )
    assert (entry["skipped"], entry["measured_rate"], entry["ended_ms"]) == (4, 15.0, None)
    ended = json.loads(control.end_entries(_summary(), "stopped", "asked")[0][1])
    assert (ended["state"], ended["reason"], ended["ended_ms"]) == ("stopped", "asked", 5000)
    assert control.end_entries(_summary(), "stopped")[1] == (b"stop/r1", None)  # the request honoured


def test_a_stop_request_in_the_log_ends_the_run_at_the_boundary(monkeypatch):
    from airflow_kafka_retry.dlt.errors import ReplayStopped
    from airflow_kafka_retry.dlt.replay_control import RunControl

    def read_new(self, replay_log, kafka_config):
        stop = {"requested_by": {"user": "ann", "host": "ops-1"}, "reason": "overloaded"}
        replay_log.add(stop_key("r1"), encode_entry(stop))

    monkeypatch.setattr(RunControl, "_read_new", read_new)
    clock = FakeClock()
    control = _control(clock, replay_log=ReplayLog("orders-dlt-replay-log"), kafka_config={})
    with pytest.raises(ReplayStopped, match=r"stop requested by ann on ops-1 \(overloaded\)"):
        control.boundary(_summary(), lambda: None)


def test_a_boundary_that_cannot_reach_the_log_fails_as_a_broker_failure(monkeypatch):
    from airflow_kafka_retry.dlt import replay_control
    from airflow_kafka_retry.dlt.errors import ReplayAbortedError
    from airflow_kafka_retry.engine.drain.supervisor import broker_transient

    monkeypatch.setattr(replay_control, "FOLLOW_TIMEOUT_S", 1.0)
    clock = FakeClock()
    config = {"bootstrap.servers": NOWHERE, "socket.connection.setup.timeout.ms": 1000}
    control = _control(clock, replay_log=ReplayLog("orders-dlt-replay-log"), kafka_config=config)
    try:
        with pytest.raises(ReplayAbortedError, match="cannot look for stop requests") as raised:
            control.boundary(_summary(), lambda: None)
    finally:
        control.close()
    assert broker_transient(raised.value), "a broker down is tried again under the same replay id"


def test_a_stop_request_not_acknowledged_in_time_says_it_may_still_land(monkeypatch):
    from airflow_kafka_retry.dlt import replay_status
    from airflow_kafka_retry.policy.errors import ReplayError
    from airflow_kafka_retry.policy.topology.file import load_topology

    monkeypatch.setattr(replay_status, "STOP_TIMEOUT_S", 0.3)
    view = replay_status.ReplayStatusView(load_topology(EXAMPLE), {"bootstrap.servers": NOWHERE})
    with pytest.raises(ReplayError) as refused:
        view._write(stop_key("r1"), b"{}")
    message = str(refused.value)
    assert f"cannot write stop/r1 to {view.log_topic} within 0.3s: not acknowledged" in message
    assert "check `dlt replay-status` before asking again" in message
