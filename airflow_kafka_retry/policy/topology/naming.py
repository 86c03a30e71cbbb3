"""
Retry and dead-letter topic names: a port of Spring's ``DestinationTopicPropertiesFactory``.

Given the delays before each retry (``BackOff.delays_for``), the suffixing strategy and same-interval
reuse, :func:`retry_topics` returns the retry topics in order, as Spring Kafka 3.2+ (unchanged in
4.0 and 4.1) computes them in ``DestinationTopicPropertiesFactory.getTopicSuffix`` and
``reusableTopicAttempts``:

* index suffixing, or delay suffixing of a fixed back-off (more than one delay, all equal):
  ``<retry_suffix>-<index>``, Spring counting from 0 (this provider's own default counts from 1);
* delay suffixing otherwise: ``<retry_suffix>-<delay ms>``; a delay that occurs more than once,
  without same-interval reuse, also gets ``-<position - first position of that delay>``;
* same-interval reuse: the repeated last delay shares one topic (Spring assumes the repeats are at
  the end); when that leaves one retry topic, it is named ``<retry_suffix>`` alone.

Spring 2.7 had no same-interval reuse for back-offs that grow: its ``FixedDelayStrategy.SINGLE_TOPIC``
collapses only a fixed back-off (``reuse="fixed_only"``).

Pure: no I/O; errors are :class:`NamingError` (a ``ValueError``) for the topology to locate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Suffixing = Literal["index", "delay"]
ReuseScope = Literal["trailing", "fixed_only"]
DltRoutingNaming = Literal["suffix", "key"]
SUFFIXINGS: tuple[Suffixing, ...] = ("index", "delay")
DLT_ROUTING_NAMINGS: tuple[DltRoutingNaming, ...] = ("suffix", "key")
#: A legal Kafka topic name: 1-249 characters from a-z A-Z 0-9 . _ - (Kafka also refuses "." and "..").
TOPIC_NAME = re.compile(r"^(?!\.{1,2}$)[a-zA-Z0-9._-]{1,249}$")


class NamingError(ValueError):
    """The delays and naming settings cannot give every retry topic its own name."""


@dataclass(frozen=True)
class RetryTopic:
    """One retry topic: what to append to the main topic, its delay, whether it takes several attempts."""

    suffix: str
    delay_ms: int
    reusable: bool


def retry_topics(
    delays: Sequence[int],
    *,
    retry_suffix: str,
    suffixing: Suffixing,
    index_start: int = 0,
    reuse: bool = False,
    reuse_scope: ReuseScope = "trailing",
) -> list[RetryTopic]:
    """
    The retry topics for ``delays`` (one delay per retry), in the order a record travels them.

    :param index_start: the first index of index suffixing (Spring: 0). Delay suffixing of a fixed
        back-off always counts from 0, as Spring does.
    :param reuse: same-interval reuse (Spring's ``SameIntervalTopicReuseStrategy.SINGLE_TOPIC``).
    :param reuse_scope: ``trailing`` (Spring 3.0+) or ``fixed_only`` (Spring 2.7's
        ``FixedDelayStrategy.SINGLE_TOPIC``: only a fixed back-off collapses into one topic).
    """
    delays = list(delays)
    size = len(delays)
    all_equal = size > 1 and len(set(delays)) == 1
    if reuse and reuse_scope == "fixed_only":
        reuse = all_equal
    if reuse and size > 1:
        _check_repeats_trail(delays)
    fixed = suffixing == "index" or all_equal
    reusable_attempts = delays.count(delays[-1]) - 1 if reuse and size > 1 else 0
    amount = size - reusable_attempts
    offset = index_start if suffixing == "index" else 0
    topics: list[RetryTopic] = []
    for i, delay in enumerate(delays[:amount]):
        repeated = delays.count(delay) > 1
        if reuse and amount == 1:
            suffix = retry_suffix
        elif fixed:
            suffix = f"{retry_suffix}-{i + offset}"
        elif not reuse and repeated:
            suffix = f"{retry_suffix}-{delay}-{i - delays.index(delay)}"
        else:
            suffix = f"{retry_suffix}-{delay}"
        topics.append(RetryTopic(suffix, delay, reusable=reuse and repeated))
    return topics


def _check_repeats_trail(delays: list[int]) -> None:
    """Same-interval reuse needs every repeated delay to be the last one, repeated at the end."""
    run = 1
    while run < len(delays) and delays[-1 - run] == delays[-1]:
        run += 1
    head = delays[: len(delays) - run]
    bad = sorted({d for d in head if head.count(d) > 1 or d == delays[-1]})
    if bad:
        raise NamingError(
            "same-interval reuse needs repeated delays only at the end (Spring's "
            "DestinationTopicPropertiesFactory "
            f"assumes so), but {', '.join(f'{d} ms' for d in bad)} repeats earlier in {delays}; "
            "reorder the delays or set reuse_same_interval: false"
        )


def dlt_routing_suffix(key: str, *, dlt_suffix: str, naming: DltRoutingNaming) -> str:
    """
    What an exception-specific DLT appends to the main topic.

    ``suffix``: the key as written (``-validation-dlt`` -> ``orders-validation-dlt``); ``key``:
    Spring's ``<key><dlt_suffix>`` (``-validation`` -> ``orders-validation-dlt``,
    ``DestinationTopicPropertiesFactory.createCustomDltProperties``).
    """
    return f"{key}{dlt_suffix}" if naming == "key" else key
