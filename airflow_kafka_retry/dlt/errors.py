"""The error a bad replay or inspect request raises before anything is moved."""

from __future__ import annotations


class ReplayError(ValueError):
    """
    Bad input for a DLT replay or inspect (filter, topic, transform, target); nothing was moved.

    The message names what is wrong: the option, the topic, or the record's coordinates.
    """


class ReplayAbortedError(RuntimeError):
    """
    A replay stopped part way (fenced by another replay of the same DLT, or a transaction failed).

    Every record moved before the failure is in the replay log; rerun with the same replay id to
    finish the job: no record is moved twice.
    """
