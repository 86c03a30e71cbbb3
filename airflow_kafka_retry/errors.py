"""Exceptions that user handlers raise or that the provider raises at its edges."""

from __future__ import annotations


class BatchFailedError(Exception):
    """
    Raised by a batch handler to say which record of the batch failed.

    The Python counterpart of Spring's ``BatchListenerFailedException``: records before
    ``index`` succeeded, record ``index`` failed with ``cause``, and the records after it are
    handed to the handler again as a new batch.

    :param index: position of the first failed record in the batch the handler was given.
    :param cause: the exception that record failed with; it drives retry classification.
    """

    def __init__(self, index: int, cause: BaseException | None = None) -> None:
        super().__init__(f"record {index} of the batch failed: {cause!r}")
        self.index = index
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


class DeserializationError(Exception):
    """
    A record's key or value could not be decoded.

    Never retried, like Spring's DeserializationException.
    """


class UnisolatedFailure(RuntimeError):
    """
    A record of a failed batch that bisection ran out of budget to try on its own.

    Always retryable, whatever the classification rules (``retry_only`` included), and
    deliberately not chained to the batch's error (``batch_error`` keeps it), so a good record
    is never dead-lettered for a neighbour's fatal error; the next tier isolates it further.
    """

    def __init__(self, batch_error: BaseException) -> None:
        super().__init__(
            f"its batch failed with {type(batch_error).__name__}: {batch_error}; the bisection budget "
            "ran out before this record was tried on its own"
        )
        self.batch_error = batch_error
        self.__suppress_context__ = True


class HandlerTimeoutError(TimeoutError):
    """
    A handler call did not return within the run's ``handler_timeout``.

    Retryable by default (a ``TimeoutError``), so a record that hangs follows the retry tiers;
    list ``airflow_kafka_retry.errors.HandlerTimeoutError`` in ``not_retryable`` to send it
    straight to the DLT instead.
    """
