"""
One round of a redrive policy: its replay ids, whether it is due, and what it does with each record.

A round runs at a tick (the Airflow run's time) and has the replay id ``redrive.<UTC tick>.<policy>``; its
parking moves have ``<that>.park``. Each record the policy's filters select (exception, original topic,
dead-lettered at least ``after`` ago) is, by :meth:`RoundRules.decide`:

* ``later``: a copy this very tick moved already (redriven and failed again since, by any policy): left for
  the next round, so no round handles one record twice;
* ``park``: already redriven ``max_redrives`` times: parked (a DLT record is moved to the parking topic, a
  parked one stays), never redriven again;
* ``redrive``: moved back to the policy's target.

**How many times a record was redriven** (:func:`redrive_count`) is read from the provider's own replay
logs, never from a header alone. A redriven copy carries ``dlt_replay-*`` headers naming the DLT (or
parking) record it was copied from; they count only when that topic's replay log recorded that move of
that very copy (the entry's replay id and the digest of the copy's replay id, key and value,
:func:`~airflow_kafka_retry.policy.headers.replay.entry_confirms`, as the engine checks before it parks a
record). A policy's move writes the copy's count into its entry (``redrives``: the source's count plus
one; a park keeps the count), so the count of a record is the ``redrives`` of the entry its confirmed claim
names: 1 for a move logged without it (a replay by hand). A forged or copied claim confirms nothing and
counts 0, but such a record is then a new dead letter (the engine dead-letters an unconfirmed claim rather
than parking it); headers cannot lower the count of a record the provider moved, because a claim must
match the entry written in the move's own transaction. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_retry.policy.headers.replay import claimed_replay, copy_digest, entry_confirms

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.codec import Header

#: The first part of every round's replay id.
ROUND_PREFIX = "redrive"
PARK_SUFFIX = ".park"

Action = Literal["redrive", "park", "later"]
#: ``entry_of(topic, partition, offset)``: the replay log entry of that record of a DLT or parking topic.
EntryOf = Callable[[str, int, int], Mapping[str, Any] | None]


def round_stamp(tick_ms: int) -> str:
    """The tick as a replay id shows it: ``20261123T100000Z``."""
    return f"{datetime.fromtimestamp(tick_ms / 1000, tz=UTC):%Y%m%dT%H%M%SZ}"


def round_id(policy: str, tick_ms: int) -> str:
    """The replay id of ``policy``'s round at ``tick_ms``: ``redrive.<tick>.<policy>``."""
    return f"{ROUND_PREFIX}.{round_stamp(tick_ms)}.{policy}"


def park_id(round_replay_id: str) -> str:
    """The replay id of a round's moves to the parking topic."""
    return round_replay_id + PARK_SUFFIX


def same_tick(replay_id: str, tick_ms: int) -> bool:
    """True when ``replay_id`` is a round (of any policy) of the tick ``tick_ms``."""
    return replay_id.startswith(f"{ROUND_PREFIX}.{round_stamp(tick_ms)}.")


def due(every_ms: int, tick_ms: int, period_ms: int) -> bool:
    """
    Whether a policy of ``every_ms`` has a round at ``tick_ms``, a tick of a DAG ticking every ``period_ms``.

    The policy's rounds fall on the first tick of each ``every_ms`` slice of time (counted from the epoch), so
    policies of different periods share one DAG and its ticks need not fall on the slices' starts.
    """
    return tick_ms // every_ms != (tick_ms - period_ms) // every_ms


def redrive_count(
    headers: Iterable[Header] | None,
    key: bytes | None,
    value: bytes | None,
    *,
    sources: Collection[str],
    entry_of: EntryOf,
) -> tuple[int, str | None]:
    """
    How many times the record was redriven, and the replay id that moved it (None: never, the logs say).

    :param sources: the topology's DLTs and parking topic (a claim naming another topic counts 0).
    :param entry_of: the replay log entry of a source record (see :data:`EntryOf`).
    """
    audit = claimed_replay(headers, sources)
    if audit is None:
        return 0, None
    entry = entry_of(audit.topic, audit.partition, audit.offset)
    if entry is None or not entry_confirms(entry, audit, copy_digest(audit.replay_id, key, value)):
        return 0, None
    count = entry.get("redrives")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        count = 1  # moved by a replay that counts no redrives (by hand): one
    return count, audit.replay_id


@dataclass(frozen=True)
class RoundRules:
    """What one round (``tick_ms``) of a policy allowing ``max_redrives`` does with a selected record."""

    max_redrives: int
    tick_ms: int

    def decide(self, count: int, moved_by: str | None) -> Action:
        """``count`` and ``moved_by`` as :func:`redrive_count` gives them."""
        if moved_by is not None and same_tick(moved_by, self.tick_ms):
            return "later"
        return "park" if count >= self.max_redrives else "redrive"

    @staticmethod
    def log_fields(action: Action, count: int, policy: str) -> dict[str, Any]:
        """What a round's move adds to the record's replay log entry: the copy's count, and whether parked."""
        if action == "park":
            return {"redrives": count, "parked": True, "policy": policy}
        return {"redrives": count + 1, "policy": policy}
