"""
Which of a dead-letter framework's own headers a replayed copy keeps (``dlt replay --framework-headers``).

The framework headers are the dead-letter context its writer added: Spring's original coordinates
(``kafka_original-*``, ``kafka_dlt-original-*``), Kafka Connect's ``__connect.errors.*`` and the share
group's ``__dlq.errors.*``. Spring's exception headers and ``retry_topic-*`` retry state are always left
off the copy by the replay itself (:func:`~airflow_kafka_retry.policy.headers.replay.replayed_headers`),
so the copy starts a fresh attempt count; the source's own headers are always kept.

* ``auto`` (the default): keep Spring's original coordinates, drop Connect's and the share group's.
  Spring's retry-topic recoverer keeps the *first* set of original headers (``setAppendOriginalHeaders(
  false)`` in ``DeadLetterPublishingRecovererFactory``), so a kept set still names the first failure, as
  replays always did. Connect's ``DeadLetterQueueReporter`` never overwrites a ``__connect.errors.*``
  header already present: a kept set would hide the context of the copy's next failure under the old
  one. The share-group DLQ never copies a record's headers, so ``__dlq.errors.*`` on a live record would
  only make a consumer take it for a dead letter.
* ``keep``: keep them all (Connect's and the share group's too).
* ``drop``: drop them all: the copy carries the source's own headers and the replay's audit only.

Pure: no I/O, no Airflow import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from airflow_kafka_retry.policy.dead_letters.families import CONNECT_PREFIX, SHARE_PREFIX
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers.codec import DEAD_LETTER_NAMES, RETRY_TOPIC_NAMES, Header

FrameworkHeaders = Literal["auto", "keep", "drop"]
FRAMEWORK_HEADER_MODES: tuple[FrameworkHeaders, ...] = ("auto", "keep", "drop")
_SPRING_ORIGINALS = frozenset((*RETRY_TOPIC_NAMES.originals, *DEAD_LETTER_NAMES.originals))


def check_mode(mode: object) -> FrameworkHeaders:
    """``mode`` checked (None and "" are ``auto``); a :class:`ReplayError` names a bad one."""
    if mode in (None, ""):
        return "auto"
    for known in FRAMEWORK_HEADER_MODES:
        if mode == known:
            return known
    raise ReplayError(f"--framework-headers {mode!r}: use one of {', '.join(FRAMEWORK_HEADER_MODES)}")


def _dropped(name: str, mode: FrameworkHeaders) -> bool:
    if mode == "keep":
        return False
    foreign = name.startswith(CONNECT_PREFIX) or name.startswith(SHARE_PREFIX)
    return foreign or (mode == "drop" and name in _SPRING_ORIGINALS)


def framework_headers_kept(headers: Sequence[Header] | None, mode: FrameworkHeaders) -> list[Header]:
    """``headers`` without the framework headers ``mode`` drops, in their order."""
    return [(k, v) for k, v in headers or () if not _dropped(k, mode)]
