"""
A topology's scheduled redrive policies, ``redrive:`` in the topology file, read and checked field by field.

::

    redrive:
      - {name: timeouts, exception: [TimeoutError], after: 1h, every: 1h, max_redrives: 3, rate: 100/s}

Every ``every``, a policy's round moves the dead letters it selects (``exception`` and/or
``original_topic``, dead-lettered at least ``after`` ago) back to ``to`` (the main topic by default) at
``rate``, through the DLT replay; a record already redriven ``max_redrives`` times is parked instead
(:mod:`.redrive.rounds`). Where a round writes comes from the policy and the topology, never from a record.

Parsing only; :mod:`~airflow_kafka_retry.policy.topology.redrive_checks` checks the policies against the
topology (its DLTs, tiers, ordering). Every problem names the file and the field (``redrive[0].rate``).
Pure: no I/O.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kafka_retry.policy.classify import is_dotted_name
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.timing.durations import format_duration_ms, parse_duration_ms

FIELD = "redrive"
_KEYS = ("name", "exception", "original_topic", "after", "every", "max_redrives", "rate", "dlt", "to")
#: What picks a policy's records; a policy needs at least one (it never redrives every dead letter).
SELECTORS = ("exception", "original_topic")
_REQUIRED = ("after", "every", "max_redrives")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: The shortest ``every``: a round's replay id carries its time to the second.
MIN_EVERY_MS = 1_000
#: Where a round writes unless ``to`` says otherwise.
DEFAULT_TO = "main"


@dataclass(frozen=True)
class RedrivePolicy:
    """
    One scheduled redrive policy, as checked.

    :param name: names the policy's task and its rounds' replay ids (default ``policy-<n>``, 1-based).
    :param exception: exception classes (dotted) a record's exception header must name (or its cause).
    :param original_topic: topics a record's original-topic header must name.
    :param after_ms: a record is taken once it has been dead-lettered (or parked) this long.
    :param every_ms: how often a round runs.
    :param max_redrives: a record redriven this many times is parked, never redriven again.
    :param rate: moves per second (None: as fast as Kafka takes them).
    :param dlt: the DLT read (None: the topology's DLT); the parking topic is read too.
    :param to: ``main``, ``first-tier`` or a tier's topic.
    """

    name: str
    exception: tuple[str, ...] = ()
    original_topic: tuple[str, ...] = ()
    after_ms: int = 0
    every_ms: int = 3_600_000
    max_redrives: int = 1
    rate: float | None = None
    dlt: str | None = None
    to: str = DEFAULT_TO

    def to_dict(self) -> dict[str, Any]:
        """The policy as written, normalised (``topology show``, a round's summary)."""
        return {
            "name": self.name,
            "exception": list(self.exception),
            "original_topic": list(self.original_topic),
            "after": format_duration_ms(self.after_ms),
            "every": format_duration_ms(self.every_ms),
            "max_redrives": self.max_redrives,
            "rate": self.rate,
            "dlt": self.dlt,
            "to": self.to,
        }


def read_redrive_policies(data: object, source: str) -> tuple[tuple[RedrivePolicy, ...], list[TopologyError]]:
    """
    Every policy in its place, and every problem found, each naming ``source`` and its field.

    A policy with a problem is kept with stand-ins for the fields that failed (an entry that is not a mapping:
    a policy without a name), so that the topology's checks
    (:mod:`~airflow_kafka_retry.policy.topology.redrive_checks`: names, DLT, target) name the same indexes
    and report its other fields too; the topology is not built while any problem stands.
    """
    if not isinstance(data, list | tuple):
        return (), [
            TopologyError(
                "must be a list of policies, each a mapping such as {exception: [TimeoutError], after: 1h, "
                f"every: 1h, max_redrives: 3}}; got {data!r}",
                field=FIELD,
                source=source,
            )
        ]
    policies: list[RedrivePolicy] = []
    errors: list[TopologyError] = []
    for index, entry in enumerate(data):
        policy, problems = _read_policy(entry, index, source)
        errors += problems
        policies.append(policy)
    return tuple(policies), errors


def _read_policy(entry: object, index: int, source: str) -> tuple[RedrivePolicy, list[TopologyError]]:
    where = f"{FIELD}[{index}]"
    errors: list[TopologyError] = []

    def fail(problem: str, key: str | None = None) -> None:
        errors.append(TopologyError(problem, field=f"{where}.{key}" if key else where, source=source))

    if not isinstance(entry, Mapping):
        fail(
            f"must be a mapping such as {{exception: [TimeoutError], after: 1h, every: 1h, max_redrives: 3}},"
            f"got {entry!r}"
        )
        return RedrivePolicy(name=""), errors
    for key in entry:
        if key not in _KEYS:
            hint = difflib.get_close_matches(str(key), _KEYS, n=1)
            fail(
                f"unknown key; {f'did you mean {hint[0]!r}?' if hint else 'known keys: ' + ', '.join(_KEYS)}",
                str(key),
            )
    for key in _REQUIRED:
        if entry.get(key) is None:
            fail("is required", key)
    name = entry.get("name", f"policy-{index + 1}")
    if not isinstance(name, str) or not _NAME.match(name):
        fail(f"must be 1-64 letters, digits, '_' or '-', got {name!r}", "name")
    exception = _names(entry.get("exception"), fail, "exception", dotted=True)
    original_topic = _names(entry.get("original_topic"), fail, "original_topic", dotted=False)
    if not exception and not original_topic and "exception" not in entry and "original_topic" not in entry:
        fail(
            "needs at least one selector (exception, original_topic): a policy never redrives every dead "
            "letter, poison records included"
        )
    after = _duration(entry.get("after"), fail, "after", minimum=0)
    every = _duration(entry.get("every"), fail, "every", minimum=MIN_EVERY_MS)
    max_redrives = entry.get("max_redrives")
    if max_redrives is not None and (
        isinstance(max_redrives, bool) or not isinstance(max_redrives, int) or max_redrives < 1
    ):
        fail(
            f"must be a whole number >= 1 (a record redriven that often is parked), got {max_redrives!r}",
            "max_redrives",
        )
    rate = _rate(entry.get("rate"), fail)
    dlt, to = entry.get("dlt"), entry.get("to", DEFAULT_TO)
    if dlt is not None and (not isinstance(dlt, str) or not dlt):
        fail(f"must name one of the topology's DLTs in full, got {dlt!r}", "dlt")
    if not isinstance(to, str) or not to:
        fail(f"must be main, first-tier or a retry tier's topic, got {to!r}", "to")
    # with stand-ins where a field failed: the topology's checks still see its dlt and to
    sound_name = name if isinstance(name, str) and _NAME.match(name) else f"policy-{index + 1}"
    policy = RedrivePolicy(
        name=sound_name,
        exception=exception,
        original_topic=original_topic,
        after_ms=after,
        every_ms=max(every, MIN_EVERY_MS),
        max_redrives=1 if errors or not isinstance(max_redrives, int) else max_redrives,
        rate=rate,
        dlt=dlt if isinstance(dlt, str) and dlt else None,
        to=to if isinstance(to, str) and to else DEFAULT_TO,
    )
    return policy, errors


def _names(value: object, fail: Any, key: str, *, dotted: bool) -> tuple[str, ...]:
    """A name or a list of names; each a dotted exception class path (``dotted``) or a non-empty string."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    what = "dotted exception class paths (myapp.errors.Timeout, TimeoutError)" if dotted else "topic names"
    if not isinstance(items, list | tuple) or not items:
        fail(f"must be a non-empty list of {what}, got {value!r}", key)
        return ()
    names: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip() or (dotted and not is_dotted_name(item.strip())):
            fail(f"{item!r} is not one of the {what}", f"{key}[{i}]")
        else:
            names.append(item.strip())
    return tuple(names)


def _duration(value: object, fail: Any, key: str, *, minimum: int) -> int:
    if value is None:
        return 0  # reported as required
    try:
        ms = parse_duration_ms(value)
    except ValueError as exc:
        fail(str(exc), key)
        return 0
    if ms < minimum:
        fail(f"must be at least {format_duration_ms(minimum)}, got {value!r}", key)
    return ms


def _rate(value: object, fail: Any) -> float | None:
    """Records per second from ``N/s``, ``N`` or a number; None when not given."""
    if value is None:
        return None
    text = str(value).strip()
    number = text[: -len("/s")].strip() if text.endswith("/s") else text
    try:
        rate = float(number) if not isinstance(value, bool) else math.nan
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or rate <= 0:
        fail(f"must be a number of records per second above 0, such as 100/s or 100; got {value!r}", "rate")
        return None
    return rate
