"""
The error a replay that stopped part way raises.

Bad input, refused before anything is moved, is :class:`~airflow_kafka_retry.policy.errors.ReplayError`.
"""

from __future__ import annotations


class ReplayAbortedError(RuntimeError):
    """
    A replay stopped part way (fenced by another replay of the same DLT, or a transaction failed).

    Every record moved before the failure is in the replay log; rerun with the same replay id to
    finish the job: no record is moved twice.
    """


class ReplayStopped(Exception):
    """
    A replay ended cleanly at a chunk boundary: a stop was requested, or its rate would pass its deadline.

    Raised between two chunks, so the chunk before committed and the next one never began; the replay
    catches it, writes its status ``stopped`` and returns its summary. The same replay id resumes it.
    """
