"""
Which produce errors mean a destination refuses a record for good, whatever the cluster's state.

A record too large for its topic, a topic the producer may not write, one that is gone: writing it again
fails again, so failing the run (and retrying it) would stall its partition on that record for ever. The
router (``engine/drain/transaction.py``) reports such records instead, for their lane to route elsewhere.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

#: Errors of one record (it cannot be written to that topic whatever the cluster's state).
_RECORD_REFUSALS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_RECORD,
        KafkaError.POLICY_VIOLATION,
    }
)
#: Errors of the destination topic (no record of the run can be written there).
_TOPIC_REFUSALS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }
)


def refusal(error: KafkaError) -> bool | None:
    """
    Whether a destination refused a record for good with ``error``.

    None: it did not (the cluster may take it later); False: that record; True: the whole topic refuses.
    """
    if error.code() in _TOPIC_REFUSALS:
        return True
    return False if error.code() in _RECORD_REFUSALS else None
