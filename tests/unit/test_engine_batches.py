"""Unit tests for airflow_kafka_retry.engine.drain.batches (pure: a fake handler, fake records, a fake sleep).

Covers Spring-like batch-failure indexing (``BatchFailedError``), bisection of batches that
failed without an index, the bisection budget and ``UnisolatedFailure``, in-place attempts,
batch splitting, outcome order and call statistics.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Sequence

import pytest

from airflow_kafka_retry import BatchFailedError
from airflow_kafka_retry.engine.drain.batches import BatchRunner, BatchStats, Outcome
from airflow_kafka_retry.engine.drain.records import TierRecord
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.errors import UnisolatedFailure
from airflow_kafka_retry.policy.classify import ExceptionClassifier, exception_chain
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
from airflow_kafka_retry.policy.topology.model import Topology

HANDLER_NAME = "myapp.handlers:handle_orders"


# ----------------------------------------------------------------------------- helpers
def make_record(offset: int, *, topic: str = "orders-retry-0", partition: int = 3) -> TierRecord:
    return TierRecord(
        key=f"k{offset}".encode(),
        value=f"v{offset}".encode(),
        headers=(("h", b"x"),),
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ms=1_700_000_000_000 + offset,
        timestamp_type=1,
        attempt=2,
        due_ms=None,
    )


def make_records(n: int, start: int = 0) -> list[TierRecord]:
    return [make_record(i) for i in range(start, start + n)]


class Poison(Exception):
    """What a poison record raises."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"poison record {offset}")
        self.offset = offset


class Recorder:
    """A handler that records the offsets of every batch it is given and fails as ``decide`` says."""

    def __init__(self, decide: Callable[[list[TierRecord], int], BaseException | None] | None = None) -> None:
        self.calls: list[list[int]] = []
        self.lists: list[list[TierRecord]] = []
        self.raised: list[BaseException | None] = []
        self.decide = decide or (lambda batch, n: None)

    def __call__(self, batch: list[TierRecord]) -> None:
        self.calls.append([r.offset for r in batch])
        self.lists.append(batch)
        exc = self.decide(batch, len(self.calls))
        self.raised.append(exc)
        if exc is not None:
            raise exc

    def calls_alone(self, offset: int) -> list[int]:
        """Indexes of the calls that got just the record at ``offset``."""
        return [i for i, call in enumerate(self.calls) if call == [offset]]


def poison_handler(poison: Iterable[int]) -> Recorder:
    """Fails (without an index) every batch holding a poison offset; each call raises a new exception."""
    bad = set(poison)

    def decide(batch: list[TierRecord], _: int) -> BaseException | None:
        for record in batch:
            if record.offset in bad:
                return Poison(record.offset)
        return None

    return Recorder(decide)


def indexed_handler(poison: Iterable[int], *, with_cause: bool = True) -> Recorder:
    """Raises ``BatchFailedError`` at the position of the first poison offset of each batch."""
    bad = set(poison)

    def decide(batch: list[TierRecord], _: int) -> BaseException | None:
        for i, record in enumerate(batch):
            if record.offset in bad:
                return BatchFailedError(i, Poison(record.offset) if with_cause else None)
        return None

    return Recorder(decide)


def runner(handler: Callable[[list[TierRecord]], object], **kwargs: object) -> BatchRunner:
    kwargs.setdefault("handler_name", HANDLER_NAME)
    return BatchRunner(handler, **kwargs)  # type: ignore[arg-type]


def offsets(outcomes: Sequence[Outcome]) -> list[int]:
    return [o.record.offset for o in outcomes]


def failed(outcomes: Sequence[Outcome]) -> list[int]:
    return [o.record.offset for o in outcomes if o.failed]


class FakeSleep:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


# ----------------------------------------------------------------------------- basics
def test_outcome_defaults() -> None:
    record = make_record(1)
    ok = Outcome(record)
    assert ok.error is None
    assert ok.tries == 1
    assert not ok.failed
    bad = Outcome(record, ValueError("x"))
    assert bad.failed


def test_all_succeed_one_call_per_batch() -> None:
    handler = Recorder()
    records = make_records(5)
    r = runner(handler, batch_size=100)
    outcomes = r.run(records)
    assert handler.calls == [[0, 1, 2, 3, 4]]
    assert [o.record for o in outcomes] == records
    assert all(o.record is rec for o, rec in zip(outcomes, records))
    assert not any(o.failed for o in outcomes)
    assert all(o.tries == 1 for o in outcomes)
    assert r.stats == BatchStats(handler_calls=1, extra_calls=0)


def test_empty_input_calls_nothing() -> None:
    handler = Recorder()
    r = runner(handler)
    assert r.run([]) == []
    assert handler.calls == []
    assert r.stats == BatchStats(0, 0)


def test_handler_gets_a_fresh_list_and_may_mutate_it() -> None:
    def destructive(batch: list[TierRecord]) -> None:
        assert type(batch) is list
        batch.clear()

    records = make_records(4)
    outcomes = runner(destructive, batch_size=4).run(tuple(records))  # any sequence is accepted
    assert [o.record for o in outcomes] == records
    assert not any(o.failed for o in outcomes)


@pytest.mark.parametrize(
    ("n", "size", "expected"),
    [
        (7, 3, [[0, 1, 2], [3, 4, 5], [6]]),
        (6, 3, [[0, 1, 2], [3, 4, 5]]),
        (3, 1, [[0], [1], [2]]),
        (2, 5, [[0, 1]]),
    ],
)
def test_batch_size_splits_records(n: int, size: int, expected: list[list[int]]) -> None:
    handler = Recorder()
    r = runner(handler, batch_size=size)
    outcomes = r.run(make_records(n))
    assert handler.calls == expected
    assert offsets(outcomes) == list(range(n))
    assert r.stats == BatchStats(handler_calls=len(expected), extra_calls=0)


def test_stats_accumulate_over_runs() -> None:
    r = runner(poison_handler({1}), batch_size=2)
    r.run(make_records(2))
    first = BatchStats(r.stats.handler_calls, r.stats.extra_calls)
    assert first == BatchStats(handler_calls=3, extra_calls=2)
    r.run(make_records(2))
    assert r.stats == BatchStats(handler_calls=6, extra_calls=4)


def test_equal_records_get_separate_outcomes() -> None:
    """Outcomes follow record identity: two equal (but distinct) records keep their own outcome."""
    twin_a, twin_b = make_record(7), make_record(7)
    assert twin_a == twin_b
    assert twin_a is not twin_b
    handler = Recorder(lambda batch, n: ValueError("first call fails") if n == 1 else None)
    outcomes = runner(handler, batch_size=1).run([twin_a, twin_b])
    assert outcomes[0].record is twin_a
    assert outcomes[1].record is twin_b
    assert outcomes[0].failed
    assert not outcomes[1].failed


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 0},
        {"batch_size": -1},
        {"max_extra_calls": -1},
        {"in_place_attempts": -1},
        {"in_place_backoff_ms": -5},
    ],
)
def test_constructor_rejects_bad_numbers(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=">= "):
        runner(Recorder(), **kwargs)


def test_base_exceptions_are_not_swallowed() -> None:
    def interrupted(batch: list[TierRecord]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner(interrupted).run(make_records(3))


# ------------------------------------------------------------ BatchFailedError (Spring indexing)
def test_batch_failed_error_redelivers_the_rest_as_a_new_batch() -> None:
    handler = indexed_handler({2})
    r = runner(handler, batch_size=5)
    outcomes = r.run(make_records(5))
    assert handler.calls == [[0, 1, 2, 3, 4], [3, 4]]
    assert failed(outcomes) == [2]
    cause = handler.raised[0].cause  # type: ignore[union-attr]
    assert outcomes[2].error is cause
    assert isinstance(outcomes[2].error, Poison)
    assert outcomes[2].error.offset == 2
    assert all(o.tries == 1 for o in outcomes)
    # the redelivery is a new list holding only the rest, not the original batch object
    assert handler.lists[1] is not handler.lists[0]
    assert r.stats == BatchStats(handler_calls=2, extra_calls=1)


def test_batch_failed_error_at_index_zero() -> None:
    handler = indexed_handler({0})
    outcomes = runner(handler, batch_size=5).run(make_records(5))
    assert handler.calls == [[0, 1, 2, 3, 4], [1, 2, 3, 4]]
    assert failed(outcomes) == [0]
    assert isinstance(outcomes[0].error, Poison)


def test_batch_failed_error_at_last_index_needs_no_redelivery() -> None:
    handler = indexed_handler({4})
    r = runner(handler, batch_size=5)
    outcomes = r.run(make_records(5))
    assert handler.calls == [[0, 1, 2, 3, 4]]
    assert failed(outcomes) == [4]
    assert r.stats == BatchStats(handler_calls=1, extra_calls=0)


def test_repeated_batch_failures_in_one_batch() -> None:
    handler = indexed_handler({1, 3, 4, 6})
    r = runner(handler, batch_size=8)
    outcomes = r.run(make_records(8))
    assert handler.calls == [
        [0, 1, 2, 3, 4, 5, 6, 7],  # index 1 -> record 1 fails
        [2, 3, 4, 5, 6, 7],  # index 1 -> record 3 fails
        [4, 5, 6, 7],  # index 0 -> record 4 fails
        [5, 6, 7],  # index 1 -> record 6 fails
        [7],  # succeeds
    ]
    assert failed(outcomes) == [1, 3, 4, 6]
    for o in outcomes:
        if o.failed:
            assert isinstance(o.error, Poison)
            assert o.error.offset == o.record.offset
    assert r.stats == BatchStats(handler_calls=5, extra_calls=4)


def test_every_record_failing_by_index() -> None:
    handler = indexed_handler(range(4))
    outcomes = runner(handler, batch_size=4).run(make_records(4))
    assert handler.calls == [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]]
    assert failed(outcomes) == [0, 1, 2, 3]


def test_batch_failed_error_is_per_batch() -> None:
    """The index refers to the batch the handler was given, not to the whole input."""
    handler = indexed_handler({4})
    outcomes = runner(handler, batch_size=3).run(make_records(6))
    assert handler.calls == [[0, 1, 2], [3, 4, 5], [5]]
    assert failed(outcomes) == [4]


def test_batch_failed_error_without_cause_is_the_record_error() -> None:
    handler = indexed_handler({1}, with_cause=False)
    outcomes = runner(handler, batch_size=3).run(make_records(3))
    assert handler.calls == [[0, 1, 2], [2]]
    error = outcomes[1].error
    assert isinstance(error, BatchFailedError)
    assert error is handler.raised[0]
    assert error.index == 1
    assert error.cause is None


def test_batch_failed_error_cause_keeps_its_own_chain() -> None:
    root = KeyError("customer")

    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        if n == 1:
            try:
                raise ValueError("invalid order") from root
            except ValueError as exc:
                return BatchFailedError(0, exc)
        return None

    outcomes = runner(Recorder(decide), batch_size=2).run(make_records(2))
    assert isinstance(outcomes[0].error, ValueError)
    assert outcomes[0].error.__cause__ is root
    assert not outcomes[1].failed


@pytest.mark.parametrize("bad_index", [3, 4, 100, -1, -3, True, False, "1", 1.0, None])
def test_bad_index_is_a_user_code_error(bad_index: object) -> None:
    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        return BatchFailedError(bad_index, ValueError("x"))  # type: ignore[arg-type]

    with pytest.raises(UserCodeError) as info:
        runner(Recorder(decide), batch_size=3).run(make_records(3))
    message = str(info.value)
    assert HANDLER_NAME in message
    assert "has 3 records" in message
    assert "valid: 0..2" in message
    assert repr(bad_index) in message
    assert "orders-retry-0[3]@0" in message  # the first record's coordinates, never its payload
    assert "v0" not in message
    assert isinstance(info.value.__cause__, BatchFailedError)


def test_bad_index_in_a_bisected_half_names_the_half_size() -> None:
    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        if len(batch) == 4:
            return RuntimeError("whole batch")
        return BatchFailedError(2, ValueError("x"))  # halves have 2 records: index 2 is out of range

    with pytest.raises(UserCodeError, match=r"has 2 records \(valid: 0\.\.1\)"):
        runner(Recorder(decide), batch_size=4).run(make_records(4))


def test_bad_index_on_redelivery_names_the_redelivered_size() -> None:
    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        return BatchFailedError(1 if n == 1 else 3)

    with pytest.raises(UserCodeError, match=r"has 2 records") as info:
        runner(Recorder(decide), batch_size=4).run(make_records(4))
    assert "orders-retry-0[3]@2" in str(info.value)


# ----------------------------------------------------------------------------- bisection
def test_bisection_exact_sequence_for_one_poison_record() -> None:
    handler = poison_handler({5})
    r = runner(handler, batch_size=8)
    outcomes = r.run(make_records(8))
    assert handler.calls == [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [4, 5],
        [4],
        [5],
        [6, 7],
    ]
    assert failed(outcomes) == [5]
    assert isinstance(outcomes[5].error, Poison)
    assert outcomes[5].error is handler.raised[5]  # the error of the call that had record 5 alone
    assert r.stats == BatchStats(handler_calls=7, extra_calls=6)


def test_batch_of_one_failing_is_not_bisected() -> None:
    handler = poison_handler({0})
    r = runner(handler, batch_size=1)
    outcomes = r.run(make_records(1))
    assert handler.calls == [[0]]
    assert outcomes[0].error is handler.raised[0]
    assert r.stats == BatchStats(handler_calls=1, extra_calls=0)


@pytest.mark.parametrize("position", [0, 1, 17, 31, 32, 50, 62, 63])
def test_one_poison_in_64_costs_at_most_2_log2_n_extra_calls(position: int) -> None:
    n = 64
    handler = poison_handler({position})
    r = runner(handler, batch_size=n)
    outcomes = r.run(make_records(n))
    bound = 2 * math.ceil(math.log2(n)) + 1
    assert r.stats.extra_calls <= bound
    assert r.stats.extra_calls == 12  # exactly two calls per level for a power of two
    assert r.stats.handler_calls == r.stats.extra_calls + 1
    assert failed(outcomes) == [position]
    assert isinstance(outcomes[position].error, Poison)
    assert all(o.error is None for o in outcomes if o.record.offset != position)
    assert offsets(outcomes) == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 5, 7, 10, 33, 100])
def test_one_poison_logarithmic_for_any_size(n: int) -> None:
    bound = 2 * math.ceil(math.log2(n))
    for position in range(n):
        handler = poison_handler({position})
        r = runner(handler, batch_size=n, max_extra_calls=1000)
        outcomes = r.run(make_records(n))
        assert r.stats.extra_calls <= bound, (n, position)
        assert failed(outcomes) == [position]


def test_several_poison_records_are_isolated_and_good_records_succeed() -> None:
    poison = {3, 9, 10, 15}
    handler = poison_handler(poison)
    r = runner(handler, batch_size=16)
    outcomes = r.run(make_records(16))
    assert failed(outcomes) == sorted(poison)
    for o in outcomes:
        if o.failed:
            assert isinstance(o.error, Poison)
            assert o.error.offset == o.record.offset
            assert handler.calls_alone(o.record.offset), "a failed record is tested alone"
            assert not isinstance(o.error, UnisolatedFailure)
    assert r.stats.extra_calls <= len(poison) * 2 * 4
    assert r.stats.handler_calls == r.stats.extra_calls + 1


def test_every_record_poison_within_budget() -> None:
    handler = poison_handler(range(8))
    r = runner(handler, batch_size=8, max_extra_calls=64)
    outcomes = r.run(make_records(8))
    assert failed(outcomes) == list(range(8))
    assert all(isinstance(o.error, Poison) for o in outcomes)
    assert r.stats.extra_calls == 14  # every node of the bisection tree below the root


def test_batch_failed_error_inside_a_bisected_half() -> None:
    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        if len(batch) == 8:
            return RuntimeError("the whole batch failed")
        offs = [r.offset for r in batch]
        if 5 in offs:
            return BatchFailedError(offs.index(5), Poison(5))
        return None

    handler = Recorder(decide)
    r = runner(handler, batch_size=8)
    outcomes = r.run(make_records(8))
    assert handler.calls == [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [0, 1, 2, 3],
        [4, 5, 6, 7],  # index 1: record 4 succeeded, record 5 failed
        [6, 7],  # the rest, redelivered as a new batch
    ]
    assert failed(outcomes) == [5]
    assert isinstance(outcomes[5].error, Poison)
    assert r.stats == BatchStats(handler_calls=4, extra_calls=3)


def test_redelivered_rest_that_fails_without_index_is_bisected() -> None:
    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        offs = [r.offset for r in batch]
        if n == 1:
            return BatchFailedError(0, Poison(0))
        if 6 in offs:
            return Poison(6)
        return None

    handler = Recorder(decide)
    outcomes = runner(handler, batch_size=8).run(make_records(8))
    assert handler.calls[:2] == [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7]]
    assert handler.calls[2:] == [[1, 2, 3], [4, 5, 6, 7], [4, 5], [6, 7], [6], [7]]
    assert failed(outcomes) == [0, 6]


def test_bisection_tolerates_flaky_batch_failure() -> None:
    """The batch failed but every half succeeds: every record succeeds, nothing is routed."""
    handler = Recorder(lambda batch, n: RuntimeError("broker hiccup") if n == 1 else None)
    r = runner(handler, batch_size=6)
    outcomes = r.run(make_records(6))
    assert handler.calls == [[0, 1, 2, 3, 4, 5], [0, 1, 2], [3, 4, 5]]
    assert not any(o.failed for o in outcomes)
    assert r.stats == BatchStats(handler_calls=3, extra_calls=2)


# ----------------------------------------------------------------------------- bisection budget
def test_zero_budget_fails_the_whole_batch_unisolated() -> None:
    handler = poison_handler({2})
    r = runner(handler, batch_size=4, max_extra_calls=0)
    outcomes = r.run(make_records(4))
    assert handler.calls == [[0, 1, 2, 3]]
    assert failed(outcomes) == [0, 1, 2, 3]
    batch_error = handler.raised[0]
    for o in outcomes:
        assert isinstance(o.error, UnisolatedFailure)
        assert o.error.batch_error is batch_error
    assert r.stats == BatchStats(handler_calls=1, extra_calls=0)


def test_unisolated_failure_is_not_chained_to_the_batch_error() -> None:
    # TypeError is fatal by default: a neighbour's TypeError must not make a record fatal
    handler = Recorder(
        lambda batch, n: TypeError("bad payload in record 0") if any(r.offset == 0 for r in batch) else None
    )
    outcomes = runner(handler, batch_size=4, max_extra_calls=0).run(make_records(4))
    error = outcomes[1].error
    assert isinstance(error, UnisolatedFailure)
    assert isinstance(error.batch_error, TypeError)
    assert error.__cause__ is None
    assert error.__context__ is None
    assert error.__suppress_context__ is True
    assert list(exception_chain(error, traverse_causes=True)) == [error]
    classifier = ExceptionClassifier(traverse_causes=True)
    assert classifier.is_fatal(error.batch_error)
    assert not classifier.is_fatal(error)
    assert classifier.is_retryable(error)
    assert "TypeError" in str(error)
    assert "bad payload in record 0" in str(error)
    assert "bisection budget" in str(error)


def test_unisolated_failure_is_not_chained_when_run_inside_an_except_block() -> None:
    handler = poison_handler({0})
    try:
        raise LookupError("caller's own exception")
    except LookupError:
        outcomes = runner(handler, batch_size=2, max_extra_calls=0).run(make_records(2))
    chain = list(exception_chain(outcomes[1].error, traverse_causes=True))  # type: ignore[arg-type]
    assert chain == [outcomes[1].error]


def unisolated_outcome(batch_error: BaseException) -> Outcome:
    """The outcome of a good record whose batch failed with ``batch_error`` and had no budget to bisect."""
    handler = Recorder(lambda batch, n: batch_error if any(r.offset == 0 for r in batch) else None)
    outcomes = runner(handler, batch_size=2, max_extra_calls=0).run(make_records(2))
    assert isinstance(outcomes[1].error, UnisolatedFailure)
    return outcomes[1]


def resolve(topology: Topology, error: BaseException):  # type: ignore[no-untyped-def]
    now = 1_700_000_000_000
    resolver = DestinationResolver(topology, clock=lambda: now)
    return resolver.resolve(
        topic=topology.topic, partition=0, attempt=1, exception=error, original_timestamp_ms=now
    )


def test_unisolated_record_goes_to_a_retry_tier_even_after_a_fatal_batch_error() -> None:
    topology = Topology(topic="orders", group_id="svc-orders")
    outcome = unisolated_outcome(TypeError("neighbour is fatal"))
    assert resolve(topology, outcome.error.batch_error).action == "dlt"  # type: ignore[union-attr]
    destination = resolve(topology, outcome.error)  # type: ignore[arg-type]
    assert destination.action == "retry"
    assert destination.reason == "retryable"


def test_unisolated_record_is_retryable_under_retry_only() -> None:
    topology = Topology(topic="orders", group_id="svc-orders", retry_only=("ConnectionError",))
    outcome = unisolated_outcome(ConnectionError("broker of the downstream service is down"))
    assert resolve(topology, ConnectionError("x")).action == "retry"  # the batch's own error is retryable
    assert topology.classifier.is_retryable(outcome.error)  # type: ignore[arg-type]
    assert resolve(topology, outcome.error).action == "retry"  # type: ignore[arg-type]


def test_budget_bounds_the_calls_and_records_never_tested_alone_are_unisolated() -> None:
    handler = poison_handler({0})
    r = runner(handler, batch_size=64, max_extra_calls=4)
    outcomes = r.run(make_records(64))
    assert r.stats.extra_calls == 4
    assert r.stats.handler_calls == 5
    # the record alone was never reached: no record may carry the poison error itself
    for o in outcomes:
        assert o.failed
        if not handler.calls_alone(o.record.offset):
            assert isinstance(o.error, UnisolatedFailure)
            assert isinstance(o.error.batch_error, Poison)


def test_budget_partial_isolation() -> None:
    handler = poison_handler({0})
    r = runner(handler, batch_size=4, max_extra_calls=2)
    outcomes = r.run(make_records(4))
    assert handler.calls == [[0, 1, 2, 3], [0, 1], [0]]
    assert isinstance(outcomes[0].error, Poison)  # isolated: its own error
    assert outcomes[0].error is handler.raised[2]
    for o in outcomes[1:]:
        assert isinstance(o.error, UnisolatedFailure)
    # the innermost failing batch is the one whose error is kept
    assert outcomes[1].error.batch_error is handler.raised[1]  # type: ignore[union-attr]
    assert outcomes[2].error.batch_error is handler.raised[0]  # type: ignore[union-attr]
    assert r.stats == BatchStats(handler_calls=3, extra_calls=2)


def test_budget_is_per_batch() -> None:
    handler = poison_handler({0, 4})
    r = runner(handler, batch_size=4, max_extra_calls=2)
    outcomes = r.run(make_records(8))
    assert handler.calls == [[0, 1, 2, 3], [0, 1], [0], [4, 5, 6, 7], [4, 5], [4]]
    assert isinstance(outcomes[0].error, Poison)
    assert isinstance(outcomes[4].error, Poison)
    assert r.stats.extra_calls == 4  # 2 per batch, more than max_extra_calls over the run


@pytest.mark.parametrize("seed", range(40))
def test_bisection_invariants_random(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    poison = {i for i in range(n) if rng.random() < 0.15}
    budget = rng.choice([0, 1, 2, 3, 5, 8, 64])
    size = rng.choice([1, 3, 8, 16, 40])
    handler = poison_handler(poison)
    r = runner(handler, batch_size=size, max_extra_calls=budget)
    outcomes = r.run(make_records(n))
    assert offsets(outcomes) == list(range(n))
    batches = math.ceil(n / size)
    assert r.stats.extra_calls <= budget * batches
    assert r.stats.handler_calls == batches + r.stats.extra_calls
    for o in outcomes:
        off = o.record.offset
        if off in poison:
            assert o.failed, "a poison record never succeeds"
        if not o.failed:
            assert any(off in call and err is None for call, err in zip(handler.calls, handler.raised))
        elif isinstance(o.error, UnisolatedFailure):
            assert not handler.calls_alone(off), "a record tested alone gets its own error"
        else:
            assert off in poison, "a good record is never failed with a neighbour's error"
            assert isinstance(o.error, Poison)
            assert o.error.offset == off


# ----------------------------------------------------------------------------- in-place attempts
def test_in_place_retry_recovers_a_transient_failure() -> None:
    sleep = FakeSleep()
    seen = {"n": 0}

    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        offs = [r.offset for r in batch]
        if 1 in offs:
            seen["n"] += 1
            if seen["n"] == 1:  # only the first delivery of record 1 fails
                return BatchFailedError(offs.index(1), ConnectionError("transient"))
        return None

    handler = Recorder(decide)
    r = runner(handler, batch_size=3, in_place_attempts=3, in_place_backoff_ms=250, sleep=sleep)
    outcomes = r.run(make_records(3))
    assert handler.calls == [[0, 1, 2], [2], [1]]
    assert not any(o.failed for o in outcomes)
    assert outcomes[1].tries == 2
    assert outcomes[0].tries == 1
    assert outcomes[2].tries == 1
    assert sleep.calls == [0.25]
    assert r.stats == BatchStats(handler_calls=3, extra_calls=2)


def test_in_place_attempts_exhausted_keep_the_last_error() -> None:
    sleep = FakeSleep()
    errors: list[BaseException] = []

    def decide(batch: list[TierRecord], n: int) -> BaseException | None:
        if any(r.offset == 0 for r in batch):
            errors.append(ConnectionError(f"try {len(errors) + 1}"))
            return errors[-1]
        return None

    handler = Recorder(decide)
    r = runner(handler, batch_size=1, in_place_attempts=3, in_place_backoff_ms=1500, sleep=sleep)
    outcomes = r.run(make_records(2))
    assert outcomes[0].failed
    assert outcomes[0].error is errors[-1]
    assert str(outcomes[0].error) == "try 4"
    assert outcomes[0].tries == 4
    assert handler.calls_alone(0) == [0, 2, 3, 4]
    assert sleep.calls == [1.5, 1.5, 1.5]
    assert not outcomes[1].failed
    assert outcomes[1].tries == 1
    assert r.stats == BatchStats(handler_calls=5, extra_calls=3)


def test_in_place_without_backoff_does_not_sleep() -> None:
    sleep = FakeSleep()
    r = runner(poison_handler({0}), batch_size=1, in_place_attempts=2, sleep=sleep)
    outcomes = r.run(make_records(1))
    assert outcomes[0].tries == 3
    assert outcomes[0].failed
    assert sleep.calls == []


def test_no_in_place_attempts_by_default() -> None:
    sleep = FakeSleep()
    handler = poison_handler({0})
    r = runner(handler, batch_size=1, in_place_backoff_ms=1000, sleep=sleep)
    outcomes = r.run(make_records(1))
    assert handler.calls == [[0]]
    assert outcomes[0].tries == 1
    assert sleep.calls == []


def test_in_place_retry_unwraps_batch_failed_error_cause() -> None:
    handler = indexed_handler({0})
    outcomes = runner(handler, batch_size=2, in_place_attempts=1).run(make_records(2))
    assert handler.calls == [[0, 1], [1], [0]]
    assert isinstance(outcomes[0].error, Poison)
    assert outcomes[0].error is handler.raised[2].cause  # type: ignore[union-attr]
    assert outcomes[0].tries == 2


def test_in_place_retry_with_batch_failed_error_without_cause() -> None:
    handler = indexed_handler({0}, with_cause=False)
    outcomes = runner(handler, batch_size=1, in_place_attempts=1).run(make_records(1))
    assert isinstance(outcomes[0].error, BatchFailedError)
    assert outcomes[0].error is handler.raised[1]


def test_in_place_retry_bad_index_is_a_user_code_error() -> None:
    handler = Recorder(lambda batch, n: BatchFailedError(0 if n == 1 else 1, ValueError("x")))
    with pytest.raises(UserCodeError, match=r"has 1 records"):
        runner(handler, batch_size=2, in_place_attempts=1).run(make_records(2))


def test_in_place_retry_resolves_unisolated_records() -> None:
    handler = poison_handler({2})
    r = runner(handler, batch_size=4, max_extra_calls=0, in_place_attempts=1)
    outcomes = r.run(make_records(4))
    assert failed(outcomes) == [2]
    assert isinstance(outcomes[2].error, Poison)  # tried on its own in place: its own error now
    assert all(o.tries == 2 for o in outcomes)
    assert handler.calls == [[0, 1, 2, 3], [0], [1], [2], [3]]


def test_in_place_retries_only_failed_records_and_keep_order() -> None:
    handler = poison_handler({1, 3})
    r = runner(handler, batch_size=2, in_place_attempts=1)
    outcomes = r.run(make_records(4))
    assert offsets(outcomes) == [0, 1, 2, 3]
    assert [o.tries for o in outcomes] == [1, 2, 1, 2]
    assert failed(outcomes) == [1, 3]
    assert len(handler.calls_alone(1)) == 2
    assert len(handler.calls_alone(3)) == 2
    assert handler.calls_alone(0) == [1]
    assert handler.calls_alone(2) == [4]


def test_in_place_attempts_skip_fatal_errors() -> None:
    sleep = FakeSleep()
    handler = Recorder(lambda batch, n: TypeError("payload has the wrong shape"))
    outcomes = runner(handler, batch_size=1, in_place_attempts=3, in_place_backoff_ms=1000, sleep=sleep).run(
        make_records(1)
    )
    assert isinstance(outcomes[0].error, TypeError)
    assert handler.calls == [[0]]
    assert outcomes[0].tries == 1
    assert sleep.calls == []


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "tries"),
    [
        (1, 4, 4),  # attempts 1, 2, 3, 4: the in-place budget (5) is cut by the topology's 4 attempts
        (2, 4, 3),  # a retry-tier record on attempt 2 may still be tried on attempts 3 and 4
        (4, 4, 1),  # on its last attempt: no in-place try at all
        (3, None, 6),  # no cap (a DLT): every in-place try is made
    ],
)
def test_in_place_attempts_never_take_a_record_past_the_topology_attempts(
    attempt, max_attempts, tries
) -> None:
    handler = poison_handler({0})
    record = dataclasses.replace(make_record(0), attempt=attempt)
    r = runner(handler, batch_size=1, in_place_attempts=5, max_attempts=max_attempts)
    [outcome] = r.run([record])
    assert outcome.failed
    assert isinstance(outcome.error, Poison)
    assert outcome.tries == tries
    assert len(handler.calls_alone(0)) == tries


def test_each_in_place_try_hands_the_handler_its_own_attempt_number() -> None:
    handler = poison_handler({0})
    record = dataclasses.replace(make_record(0), attempt=2)
    [outcome] = runner(handler, batch_size=1, in_place_attempts=2).run([record])
    assert [[r.attempt for r in batch] for batch in handler.lists] == [[2], [3], [4]]
    assert outcome.record is record
    assert outcome.tries == 3
