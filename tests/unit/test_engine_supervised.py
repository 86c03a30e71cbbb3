"""The engine's own deadlines on client calls, and the supervisor that abandons and retries an attempt."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.engine.drain.due_records import DrainError
from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.drain.supervisor import broker_transient, run_supervised
from airflow_kafka_retry.engine.drain.transaction import FencedError, RouteError
from airflow_kafka_retry.engine.kafka.deadlines import AttemptAbandoned, CallDeadlines, CallStuckError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_call_that_returns_in_time_is_never_abandoned() -> None:
    clock = Clock()
    deadlines = CallDeadlines("t[0]", grace_s=5, clock=clock)
    with deadlines.call("commit_transaction", 20, "the transaction coordinator"):
        clock.now += 24.9
        assert deadlines.overdue() is None
    clock.now += 100  # nothing in progress: nothing to abandon
    assert deadlines.overdue() is None
    assert deadlines.abandoned is None


def test_a_stop_during_a_commit_says_the_chunk_may_have_committed() -> None:
    """Issue 48 item 8: an AbortNow stop while ``commit_transaction`` ran reported "nothing of it committed",
    although the commit may have gone through. A stop between calls, or during another call, still says the
    open chunk is aborted."""
    from airflow_kafka_retry.engine.kafka.deadlines import AttemptStopped

    during_commit = CallDeadlines("t[0]", clock=Clock())
    with pytest.raises(AttemptAbandoned), during_commit.call("commit_transaction", 20, "the coordinator"):
        stopped = during_commit.stop_now("supervisor_gone")
    assert isinstance(stopped, AttemptStopped)
    assert stopped.may_have_committed
    assert "while commit_transaction was in progress: the chunk may have committed" in str(stopped)

    for call in ("flush", None):
        deadlines = CallDeadlines("t[0]", clock=Clock())
        if call is None:
            stopped = deadlines.stop_now("supervisor_gone")
        else:
            with pytest.raises(AttemptAbandoned), deadlines.call(call, 20, "the leaders"):
                stopped = deadlines.stop_now("supervisor_gone")
        assert not stopped.may_have_committed, call
        assert str(stopped) == "t[0]: stopped at once (supervisor_gone)"


def _overrun(deadlines: CallDeadlines, clock: Clock, name: str, timeout: float, *, to: float) -> list[object]:
    """Make a call that is still running when the clock reads ``to``; what ``overdue`` said on the way."""
    seen: list[object] = []
    try:
        with deadlines.call(name, timeout, "the group coordinator"):
            clock.now = to - 1.0
            seen.append(deadlines.overdue())
            clock.now = to
            seen.append(deadlines.overdue())
    except AttemptAbandoned:
        seen.append("abandoned")
    return seen


def test_a_call_past_its_timeout_and_grace_is_abandoned_and_its_thread_stops_when_it_returns() -> None:
    clock = Clock()
    deadlines = CallDeadlines("orders[2]", grace_s=5, clock=clock)
    first, stuck, end = _overrun(deadlines, clock, "send_offsets_to_transaction", 20, to=125.1)
    assert first is None
    assert isinstance(stuck, CallStuckError)
    assert "orders[2]: send_offsets_to_transaction waited 25s for the group coordinator" in str(stuck)
    assert end == "abandoned"  # the call returned after it was abandoned: the attempt stops there
    # whatever the abandoned attempt tries next stops before it calls anything
    called = []
    with pytest.raises(AttemptAbandoned), deadlines.call("poll", 1, "the leader"):
        called.append("poll")
    assert called == []


def test_give_up_at_cuts_every_deadline_and_timeout() -> None:
    clock = Clock()
    deadlines = CallDeadlines("t[0]", grace_s=5, clock=clock, give_up_at=110.0)
    assert deadlines.timeout(20) == 10.0
    # give_up_at + grace (115), not the call's own 100 + 20 + 5
    before, stuck, end = _overrun(deadlines, clock, "commit_transaction", 20, to=115.5)
    assert before is None
    assert isinstance(stuck, CallStuckError)
    assert end == "abandoned"


def _kafka(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def _caused(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (CallStuckError("x"), True),
        (_kafka(KafkaError._TIMED_OUT), True),
        (_caused(RouteError("transaction failed"), _kafka(KafkaError.NOT_ENOUGH_REPLICAS)), True),
        (_caused(DrainError("committed offset"), _kafka(KafkaError.COORDINATOR_NOT_AVAILABLE)), True),
        (_caused(FencedError("fenced"), _kafka(KafkaError._FENCED)), False),
        (_caused(RouteError("x"), _kafka(KafkaError.PRODUCER_FENCED)), False),
        (_caused(RouteError("x"), _kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED)), False),
        (ValueError("there is no partition 7"), False),
        (None, False),
    ],
)
def test_broker_transient_tells_the_clusters_failures_from_the_inputs(
    error: BaseException | None, transient: bool
) -> None:
    assert broker_transient(error) is transient


def test_an_exception_marked_transient_says_so_itself() -> None:
    silent = DrainError("no records and no end-of-partition for 60s")
    silent.transient = True
    assert broker_transient(silent)
    unacked = RouteError("3 routed records were not acknowledged")
    unacked.transient = False
    assert not broker_transient(_caused(unacked, _kafka(KafkaError._TIMED_OUT)))


class FakeJob:
    """An attempt: ``plan`` is "hang" (a call that never returns until released), "ok", or an exception."""

    released = threading.Event()

    def __init__(self, deadlines: CallDeadlines, plan: object, drained: int) -> None:
        self.deadlines, self.plan, self.drained = deadlines, plan, drained
        self.summary = PartitionSummary("t", 0, "g")
        self.failure: BaseException | None = None
        self.settled = False
        self.after_release: list[str] = []
        self.where = "t[0]"
        self.on_chunk = None  # as PartitionJob's: no progress reports here

    def run(self) -> PartitionSummary:
        self.summary.drained += self.drained  # a chunk committed before anything went wrong
        try:
            if self.plan == "hang":
                with self.deadlines.call("commit_transaction", 0.05, "the transaction coordinator"):
                    FakeJob.released.wait(10)
                self.after_release.append("went on")  # must never happen
            elif isinstance(self.plan, BaseException):
                raise self.plan
        except AttemptAbandoned:
            self.after_release.append("abandoned")
            return self.summary
        except Exception as exc:
            self.failure, self.summary.status, self.summary.error = exc, "failed", str(exc)
        self.settled = True
        return self.summary

    def abandoned_summary(self, error: str) -> PartitionSummary:
        copy = PartitionSummary.from_dict(self.summary.to_dict())
        copy.status, copy.error = "failed", error
        return copy


def _supervise(plans: list[object], **kwargs: object) -> tuple[PartitionSummary, list[FakeJob]]:
    jobs: list[FakeJob] = []

    def make(deadlines: CallDeadlines) -> FakeJob:
        deadlines.grace_s = 0.05
        jobs.append(FakeJob(deadlines, plans[min(len(jobs), len(plans) - 1)], drained=10))
        return jobs[-1]

    options = {"where": "t[0]", "retry_s": 5.0, "poll_s": 0.01, **kwargs}
    return run_supervised(make, **options), jobs  # type: ignore[arg-type]


def test_a_stuck_attempt_is_abandoned_and_the_partition_finishes_on_a_fresh_one() -> None:
    FakeJob.released.clear()
    summary, jobs = _supervise(["hang", "ok"])
    assert summary.status == "ok", summary.error
    assert summary.drained == 20  # what the abandoned attempt committed is kept
    assert len(jobs) == 2
    FakeJob.released.set()  # the stuck call returns at last: its thread stops there
    deadline = time.monotonic() + 5
    while not jobs[0].after_release and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jobs[0].after_release == ["abandoned"]
    assert summary.drained == 20


def test_a_failure_of_the_input_is_not_retried() -> None:
    summary, jobs = _supervise([ValueError("there is no partition 7")])
    assert summary.status == "failed"
    assert len(jobs) == 1
    assert "gave up" not in (summary.error or "")


def test_retries_end_with_an_error_naming_the_call_and_the_cluster() -> None:
    FakeJob.released.clear()
    summary, jobs = _supervise(
        ["hang"], retry_s=0.3, describe_cluster=lambda: "brokers in the cluster's metadata now: 2, 3"
    )
    FakeJob.released.set()
    assert summary.status == "failed"
    assert len(jobs) >= 2
    error = summary.error or ""
    assert "commit_transaction waited" in error
    assert "the transaction coordinator" in error
    assert f"gave up after {len(jobs)} attempt(s): the broker retries (broker_retry_s) are used up" in error
    assert "brokers in the cluster's metadata now: 2, 3" in error


def test_a_stop_request_ends_the_retries() -> None:
    failure = _caused(RouteError("transaction failed"), _kafka(KafkaError._TIMED_OUT))
    summary, jobs = _supervise([failure, "ok"], should_stop=lambda: "killed")
    assert len(jobs) == 1
    assert "the run was asked to stop (killed)" in (summary.error or "")


def test_a_transient_failure_is_retried_and_the_later_attempt_decides_the_status() -> None:
    failure = _caused(RouteError("transaction failed"), _kafka(KafkaError.NOT_ENOUGH_REPLICAS))
    summary, jobs = _supervise([failure, "ok"])
    assert len(jobs) == 2
    assert summary.status == "ok"
    assert summary.error is None
    assert summary.drained == 20
    assert summary.retries == 1
    assert summary.retry_errors == ["transaction failed"]


def test_cluster_now_names_the_brokers_that_do_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from airflow_kafka_retry.engine.drain import supervisor as supervised
    from airflow_kafka_retry.sandbox.processes import free_port

    class Admin:
        def __init__(self, config: object) -> None:
            pass

        def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
            brokers = {
                1: SimpleNamespace(id=1, host="127.0.0.1", port=free_port()),  # nobody listens
                2: SimpleNamespace(id=2, host="127.0.0.1", port=listening.getsockname()[1]),
            }
            parts = {0: SimpleNamespace(leader=2)}
            return SimpleNamespace(brokers=brokers, topics={topic: SimpleNamespace(partitions=parts)})

    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        monkeypatch.setattr("confluent_kafka.admin.AdminClient", Admin)
        said = supervised.cluster_now({"bootstrap.servers": "x:1"}, "orders", 0)
    assert "1 (127.0.0.1:" in said
    assert ", not answering)" in said.split("2 (")[0]
    assert "not answering" not in said.split("2 (")[1]
    assert "leader of orders[0]: broker 2" in said


def test_bounded_returns_raises_or_abandons_naming_what_it_waited_for() -> None:
    from airflow_kafka_retry.engine.kafka.deadlines import bounded

    assert bounded(lambda: 7, seconds=1, what="x") == 7
    with pytest.raises(ValueError, match="bad"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("bad")), seconds=1, what="x")
    stuck = threading.Event()
    with pytest.raises(CallStuckError, match="the commit of group 'g' did not end within 0.05s"):
        bounded(lambda: stuck.wait(5), seconds=0.05, what="the commit of group 'g'")
    stuck.set()
