"""
What a DLT replay is asked to do, as given (CLI strings, operator fields, DAG params), and its id.

:class:`ReplayRequest` holds the filters, the target and the transform; :meth:`ReplayRequest.spec` is
what a rerun of the same replay id must repeat. A replay id names one replay in the replay log: a
fresh one is ``replay-<UTC time>-<random>``, a given one is checked.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_kafka_retry.dlt.filters import ReplayFilter
from airflow_kafka_retry.policy.dead_letters.framework_headers import check_mode
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

_REPLAY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:+")


def new_replay_id(now_ms: int | None = None) -> str:
    """A fresh replay id: ``replay-<UTC time>-<random>``."""
    at = datetime.fromtimestamp((now_ms if now_ms is not None else wall_clock_ms()) / 1000, tz=UTC)
    return f"replay-{at:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def check_replay_id(replay_id: str) -> str:
    if not replay_id or len(replay_id) > 200 or not set(replay_id) <= _REPLAY_ID_CHARS:
        raise ReplayError(
            f"--replay-id {replay_id!r}: use 1-200 characters from letters, digits and . _ - : +"
        )
    return replay_id


@dataclass(frozen=True)
class ReplayRequest:
    """
    What to replay, as given (CLI strings, operator fields, DAG params); checked by :class:`Replay`.

    :param dlt: the DLT or parking topic (default: the topology's DLT; ``parking`` for the parking topic).
    :param to: ``main``, ``first-tier`` or a topic; default: each record's original topic.
    :param transform: ``package.module:function`` editing each record (None: leave it out).
    :param framework_headers: ``auto`` (None), ``keep`` or ``drop``: the dead-letter framework's own headers
        on the copies (:mod:`~airflow_kafka_retry.policy.dead_letters.framework_headers`).

    The filter fields are those of :meth:`ReplayFilter.build`.
    """

    dlt: str | None = None
    exception: Any = None
    original_topic: Any = None
    since: Any = None
    until: Any = None
    key: Any = None
    partition: Any = None
    offsets: Any = None
    limit: Any = None
    to: str | None = None
    transform: str | None = None
    framework_headers: str | None = None

    def spec(self) -> dict[str, Any]:
        """
        The request as normalised plain data: what a rerun of the same replay id must repeat.

        Times are kept as given (a duration ago is anchored at the replay's start, recorded in its plan).
        """
        described = self.build_filter(0).describe()
        del described["since_ms"], described["until_ms"]
        raw = {
            name: None if getattr(self, name) in (None, "") else str(getattr(self, name))
            for name in ("dlt", "since", "until", "to", "transform")
        }
        mode = check_mode(self.framework_headers)
        # only a mode other than the default is recorded: a replay id logged before the option existed
        # resumes with the same spec
        return {**raw, **described, **({"framework_headers": mode} if mode != "auto" else {})}

    def build_filter(self, now_ms: int) -> ReplayFilter:
        return ReplayFilter.build(
            exception=self.exception,
            original_topic=self.original_topic,
            since=self.since,
            until=self.until,
            key=self.key,
            partition=self.partition,
            offsets=self.offsets,
            limit=self.limit,
            now_ms=now_ms,
        )
