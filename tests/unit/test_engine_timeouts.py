"""handler_timeout (faults case 5): a hung call fails its batch, bisection isolates the record that hangs."""

from __future__ import annotations

import threading

import pytest

from airflow_kafka_retry.engine.drain.batches import BatchRunner
from airflow_kafka_retry.engine.drain.handler_timeouts import HandlerStuckError, TimedHandler
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.records import TierRecord
from airflow_kafka_retry.errors import HandlerTimeoutError


def _records(n: int) -> list[TierRecord]:
    return [
        TierRecord(
            key=None,
            value=i,
            headers=(),
            topic="t",
            partition=0,
            offset=i,
            timestamp_ms=0,
            timestamp_type=1,
            attempt=1,
        )
        for i in range(n)
    ]


class Hangs:
    """Handles records, except that a batch holding ``poison`` blocks until released."""

    def __init__(self, poison: int) -> None:
        self.poison = poison
        self.release = threading.Event()
        self.handled: list[int] = []

    def __call__(self, records: list[TierRecord]) -> None:
        if any(r.value == self.poison for r in records):
            self.release.wait(30)
            return
        self.handled.extend(r.value for r in records)


def test_a_call_that_overruns_raises_and_names_the_batch() -> None:
    hangs = Hangs(poison=0)
    timed = TimedHandler(hangs, 0.05, name="m:f")
    with pytest.raises(
        HandlerTimeoutError,
        match=r"'m:f' did not return within 0.05s for a batch of 2 record\(s\) "
        r"starting at t\[0\]@0",
    ):
        timed(_records(2))
    assert timed.abandoned == 1
    hangs.release.set()


def test_handler_errors_and_successes_pass_through() -> None:
    def boom(records: list[TierRecord]) -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        TimedHandler(boom, 5, name="m:f")(_records(1))
    hangs = Hangs(poison=-1)
    TimedHandler(hangs, 5, name="m:f")(_records(3))
    assert hangs.handled == [0, 1, 2]


#: For calls that must NOT time out: 10x more than a loaded 2-core machine needs to start a thread and run a
#: trivial handler. Calls that must time out hang until released, so any timeout works for them.
MUST_NOT_TIME_OUT_S = 0.5


def test_bisection_isolates_the_record_that_hangs_and_the_rest_succeed() -> None:
    hangs = Hangs(poison=5)
    # 4 calls hang (all 8 records, 4..7, 4..5, then 5 alone, isolated): each costs the timeout
    timed = TimedHandler(hangs, MUST_NOT_TIME_OUT_S, name="m:f")
    runner = BatchRunner(timed, handler_name="m:f", batch_size=8)
    outcomes = runner.run(_records(8))
    failed = [o.record.value for o in outcomes if o.failed]
    assert failed == [5]
    assert isinstance(outcomes[5].error, HandlerTimeoutError)
    assert sorted(hangs.handled) == [0, 1, 2, 3, 4, 6, 7]
    hangs.release.set()


def test_in_place_attempts_retry_a_timed_out_record_each_try_costing_a_timeout() -> None:
    hangs = Hangs(poison=0)
    timed = TimedHandler(hangs, 0.05, name="m:f")
    runner = BatchRunner(timed, handler_name="m:f", batch_size=1, in_place_attempts=2, max_attempts=5)
    [outcome] = runner.run(_records(1))
    assert outcome.failed
    assert outcome.tries == 3
    assert timed.abandoned == 3  # the first call and two in-place tries, each abandoned
    hangs.release.set()


def test_too_many_abandoned_calls_stop_the_partition_instead_of_piling_up_threads() -> None:
    hangs = Hangs(poison=0)
    timed = TimedHandler(hangs, 0.02, name="m:f", max_abandoned=2)
    runner = BatchRunner(timed, handler_name="m:f", batch_size=1)
    runner.run(_records(1))
    runner.run(_records(1))
    with pytest.raises(HandlerStuckError, match="overran handler_timeout .* 2 times"):
        runner.run(_records(1))
    hangs.release.set()


@pytest.mark.parametrize("value", [0, -1, True, "5"])
def test_handler_timeout_option_is_validated(value: object) -> None:
    with pytest.raises(ValueError, match="handler_timeout_s must be a number of seconds > 0 or None"):
        DrainOptions(handler="m:f", handler_timeout_s=value)


def test_handler_timeout_defaults_to_none_and_round_trips() -> None:
    assert DrainOptions(handler="m:f").handler_timeout_s is None
    options = DrainOptions(handler="m:f", handler_timeout_s=2.5)
    assert DrainOptions(**options.to_dict()) == options
