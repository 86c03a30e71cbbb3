"""
The bench workload's handler: a no-op, except that 1 % of records fail (half transiently, half fatally).

Record ``i`` has the key ``b"%09d" % i``: it fails when ``i % 100 == 0``, transiently when
``(i // 100)`` is even (it goes on to the next retry tier), fatally otherwise (``InvalidRecord`` is
``not_retryable``: straight to the DLT). Every case of the bench uses :func:`fate`, so each one does
the same work per record.
"""

from __future__ import annotations

from airflow_kafka_retry.errors import BatchFailedError

OK, TRANSIENT, FATAL = 0, 1, 2


class TransientError(Exception):
    """A failure worth retrying later."""


class InvalidRecord(Exception):
    """A failure no retry can fix (listed in the bench topology's ``not_retryable``)."""


def fate(key: bytes) -> int:
    """OK, TRANSIENT or FATAL for the record with this key."""
    if not key.endswith(b"00"):
        return OK
    return TRANSIENT if key[-3] % 2 == 0 else FATAL


def handle(records: list) -> None:
    """The local and Spark engines' handler (``bench.handler:handle``)."""
    for i, record in enumerate(records):
        key = record.key
        if key.endswith(b"00"):
            outcome = fate(key)
            error = TransientError("transient") if outcome == TRANSIENT else InvalidRecord("invalid")
            raise BatchFailedError(i, error)
