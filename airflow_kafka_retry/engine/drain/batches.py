"""
Calling the user's handler: batch-failure indexing, bisection, in-place attempts.

* ``BatchFailedError(index, cause)``: records before ``index`` succeeded, record ``index``
  failed with ``cause``, the rest are handed to the handler again as a new batch (Spring's
  ``BatchListenerFailedException``).
* Any other exception fails the whole batch. Instead of sending every record of the batch
  around the tiers, the batch is bisected until the failing records are isolated, so one
  poison record costs O(log n) extra calls; ``max_extra_calls`` bounds the search, and records
  still unresolved when it runs out fail with :class:`UnisolatedFailure` - retryable whatever the
  batch's error was, so a good record is never dead-lettered for a neighbour's fatal error; the
  next tier isolates it further.
* ``in_place_attempts``: a failed record is retried on its own that many more times, after
  ``in_place_backoff_ms``, before it is routed (like ``DefaultErrorHandler`` with a
  ``FixedBackOff``); each try counts as a delivery attempt, so in-place tries stop once a
  record reaches ``max_attempts`` (the topology's total attempts). Errors that are not retryable
  are not retried in place (Spring recovers them at once).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from airflow_kafka_retry.engine.drain.distribution import Distribution
from airflow_kafka_retry.engine.drain.records import TierRecord
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.errors import BatchFailedError, UnisolatedFailure
from airflow_kafka_retry.policy.classify import ExceptionClassifier

Handler = Callable[[list[TierRecord]], object]


@dataclass
class Outcome:
    """What became of one record: ``error`` is None on success; ``tries`` counts handler attempts."""

    record: TierRecord
    error: BaseException | None = None
    tries: int = 1

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass
class BatchStats:
    """Handler calls of a run of batches, and their durations."""

    handler_calls: int = 0
    extra_calls: int = 0  # calls spent isolating failures (bisection, in-place retries)
    handler_ms: Distribution = field(default_factory=Distribution, compare=False)  # each call's duration


class BatchRunner:
    """
    Runs a handler over records and reports one :class:`Outcome` per record, in input order.

    :param handler: ``handle(records: list[TierRecord]) -> None``.
    :param handler_name: how error messages name the handler (its import path).
    :param batch_size: records per handler call.
    :param max_extra_calls: bound on bisection calls per batch that failed without an index.
    :param in_place_attempts: extra tries of a failed record before it is routed.
    :param in_place_backoff_ms: pause before each in-place try.
    :param max_attempts: no in-place try takes a record past this delivery attempt (``attempt``
        of the record plus its tries); None: no cap (draining a DLT, where attempts do not route).
    :param retryable: classification of errors; not-retryable ones are never retried in place
        (default: the default classifier, which knows the standard fatal exceptions).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        handler_name: str,
        batch_size: int = 100,
        max_extra_calls: int = 64,
        in_place_attempts: int = 0,
        in_place_backoff_ms: int = 0,
        max_attempts: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        retryable: Callable[[BaseException], bool] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_extra_calls < 0 or in_place_attempts < 0 or in_place_backoff_ms < 0:
            raise ValueError("max_extra_calls, in_place_attempts and in_place_backoff_ms must be >= 0")
        self.handler = handler
        self.handler_name = handler_name
        self.batch_size = batch_size
        self.max_extra_calls = max_extra_calls
        self.in_place_attempts = in_place_attempts
        self.in_place_backoff_ms = in_place_backoff_ms
        self.max_attempts = max_attempts
        self.sleep = sleep
        self.retryable = retryable or ExceptionClassifier().is_retryable
        self.stats = BatchStats()

    def run(self, records: Sequence[TierRecord]) -> list[Outcome]:
        """One outcome per record, in input order."""
        failed = dict(self.run_failures(records))
        return [failed.get(i) or Outcome(record) for i, record in enumerate(records)]

    def run_failures(self, records: Sequence[TierRecord]) -> list[tuple[int, Outcome]]:
        """
        ``(position in records, outcome)`` of every record whose first call failed, in input order.

        An in-place retry may have recovered such a record since (``outcome.failed`` is then false).
        The drain's path: records that succeed at once cost no outcome object.
        """
        failed: dict[int, Outcome] = {}
        for start in range(0, len(records), self.batch_size):
            batch = list(records[start : start + self.batch_size])
            budget = [self.max_extra_calls]
            self._run_batch(batch, start, failed, budget, extra=False)
        result = sorted(failed.items())
        if self.in_place_attempts:
            for _, outcome in result:
                self._retry_in_place(outcome)
        return result

    # ------------------------------------------------------------------ internals
    def _call(self, batch: list[TierRecord], *, extra: bool) -> BaseException | None:
        self.stats.handler_calls += 1
        if extra:
            self.stats.extra_calls += 1
        started = time.perf_counter()
        try:
            self.handler(list(batch))
        except Exception as exc:  # user code: every failure is classified later
            return exc
        finally:
            self.stats.handler_ms.add((time.perf_counter() - started) * 1000)
        return None

    def _check_index(self, exc: BatchFailedError, batch: list[TierRecord]) -> int:
        index = exc.index
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(batch):
            raise UserCodeError(
                f"handler {self.handler_name!r} raised BatchFailedError with index {index!r}, but the batch "
                f"it was given has {len(batch)} records (valid: 0..{len(batch) - 1}); first record of the "
                f"batch: {batch[0].coordinates}"
            ) from exc
        return index

    # ``base`` is the position of ``batch[0]`` in the records given to run_failures; ``failed`` maps
    # positions to outcomes. Records not in ``failed`` when the run ends succeeded.
    def _run_batch(
        self,
        batch: list[TierRecord],
        base: int,
        failed: dict[int, Outcome],
        budget: list[int],
        *,
        extra: bool,
    ) -> None:
        while batch:
            error = self._call(batch, extra=extra)
            if error is None:
                return
            if isinstance(error, BatchFailedError):
                index = self._check_index(error, batch)
                failed[base + index] = Outcome(batch[index], error.cause or error)
                batch = batch[index + 1 :]
                base += index + 1
                extra = True  # redelivering the rest is part of handling the failure
                continue
            self._bisect(batch, base, error, failed, budget)
            return

    def _bisect(
        self,
        batch: list[TierRecord],
        base: int,
        error: BaseException,
        failed: dict[int, Outcome],
        budget: list[int],
    ) -> None:
        if len(batch) == 1:
            failed[base] = Outcome(batch[0], error)
            return
        middle = len(batch) // 2
        for half, half_base in ((batch[:middle], base), (batch[middle:], base + middle)):
            if budget[0] < 1:  # out of budget: this half is retried in a later tier
                for i, record in enumerate(half):
                    failed[half_base + i] = Outcome(record, UnisolatedFailure(error))
                continue
            budget[0] -= 1
            self._run_half(half, half_base, failed, budget)

    def _run_half(
        self, half: list[TierRecord], base: int, failed: dict[int, Outcome], budget: list[int]
    ) -> None:
        error = self._call(half, extra=True)
        if error is None:
            return
        if isinstance(error, BatchFailedError):
            index = self._check_index(error, half)
            failed[base + index] = Outcome(half[index], error.cause or error)
            self._run_batch(half[index + 1 :], base + index + 1, failed, budget, extra=True)
        else:
            self._bisect(half, base, error, failed, budget)

    def _retry_in_place(self, outcome: Outcome) -> None:
        for _ in range(self.in_place_attempts):
            if outcome.error is None or not self.retryable(outcome.error):
                return
            if self.max_attempts is not None and outcome.record.attempt + outcome.tries > self.max_attempts:
                return  # the next try would be one attempt more than the topology allows
            if self.in_place_backoff_ms:
                self.sleep(self.in_place_backoff_ms / 1000)
            outcome.tries += 1
            # the handler sees the delivery attempt this try is (the outcome keeps the original record)
            retried = dataclasses.replace(outcome.record, attempt=outcome.record.attempt + outcome.tries - 1)
            error = self._call([retried], extra=True)
            if isinstance(error, BatchFailedError):
                self._check_index(error, [retried])
                error = error.cause or error
            outcome.error = error
