"""Exceptions that user handlers raise or that the provider raises at its edges."""

from __future__ import annotations


class BatchFailedError(Exception):
    """Raised by a batch handler to say which record of the batch failed.

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
    """A record's key or value could not be decoded; never retried (like Spring's DeserializationException)."""
