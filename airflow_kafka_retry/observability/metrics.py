"""
Metrics of tier runs, tier backlogs, key order and the DLT watch, sent through Airflow's own ``Stats``.

Airflow's ``[metrics]`` settings decide where they go (StatsD, Datadog's DogStatsD, OpenTelemetry)
and whether tags travel (see the metrics table in docs/metrics.md): nothing is configured here. Every name
starts with :data:`PREFIX`; tags name the path, the tier and, where it matters, the DLT topic and
the exception class -- never an offset or a key, and a partition only on the key-order gauges
(:func:`ordering_gauges`: a series per partition of the main topic, which the topology bounds). The
exception class comes from record headers (anyone who can write to a DLT chooses it), so it is
sanitized (:func:`sanitize_tag`) and capped: at most :data:`MAX_EXCEPTION_TAGS` distinct values per
topology besides the classes the topology names, the rest counted as ``other`` (:func:`exception_tags`;
the DLT watch keeps the values it admitted with its group's committed offsets). So the number of series
stays bounded by the topology. Building the metrics is pure (:func:`run_metrics`, :func:`backlog_metrics`,
:func:`ordering_gauges`, :func:`dlt_watch_metrics`); :func:`emit` sends them and never fails the caller.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.distribution import Distribution
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.engine.heads.peek import TierPeek
    from airflow_kafka_retry.engine.scans.order_state import OrderState
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)

PREFIX = "kafka_retry"
#: Distinct exception tag values a topology's DLT metrics admit besides the classes it names.
MAX_EXCEPTION_TAGS = 20
#: The exception tag of everything past the cap.
OTHER = "other"
_TAG_LENGTH = 100
_NOT_TAG = re.compile(r"[^A-Za-z0-9_.$-]")
Kind = Literal["counter", "timer", "gauge"]


@dataclass(frozen=True)
class Metric:
    """One value to send: a counter increment, a timing (ms) or a gauge."""

    kind: Kind
    name: str
    value: float
    tags: Mapping[str, str] = field(default_factory=dict)


def tier_tags(topology_topic: str, tier_topic: str, tier_index: int) -> dict[str, str]:
    """The tags every tier metric carries: the path (its main topic), the tier's topic and index."""
    return {"topology": topology_topic, "tier_topic": tier_topic, "tier": str(tier_index)}


def _counter(name: str, value: float, tags: Mapping[str, str], **more: str) -> Metric:
    return Metric("counter", f"{PREFIX}.{name}", value, {**tags, **more})


def _distribution(name: str, dist: Distribution, tags: Mapping[str, str]) -> list[Metric]:
    """Mean and max as timers, and cumulative bucket counts (``le`` tag) as counters; nothing when empty."""
    if not dist.count:
        return []
    metrics = [
        Metric("timer", f"{PREFIX}.tier.{name}", round(dist.sum_ms / dist.count, 3), dict(tags)),
        Metric("timer", f"{PREFIX}.tier.{name}_max", dist.max_ms, dict(tags)),
    ]
    metrics += [_counter(f"tier.{name}_bucket", n, tags, le=le) for le, n in dist.cumulative().items()]
    return metrics


def run_metrics(summary: RunSummary, topology: Topology) -> list[Metric]:
    """
    What one reprocess run sends: counts, its duration, handler time per call and lateness.

    ``routed`` counts records sent on to a later retry tier; ``dead_lettered`` (one per DLT topic,
    tag ``dlt_topic``) those sent to a DLT; ``parked`` those sent to the parking topic; ``dropped``
    failed records with no home (``dlt_strategy: no_dlt``); ``handler_errors`` records the handler
    (or a deserializer) failed on, whatever became of them; ``untrusted_replay_headers`` failed
    records whose ``dlt_replay-*`` headers no replay log confirms (ignored: dead-lettered, not parked).
    """
    tags = tier_tags(topology.topic, summary.topic, summary.tier)
    totals = summary.totals()
    to_dlts = dict(totals["dlt_topics"])  # records whose destination was a DLT or the parking topic
    parked = to_dlts.pop(topology.parking_topic, 0) if topology.parking_topic else 0
    routed_on = sum(totals["routed"].values()) - sum(to_dlts.values()) - parked
    metrics = [
        _counter("tier.runs", 1, tags, status="ok" if summary.ok else "failed"),
        _counter("tier.drained", totals["drained"], tags),
        _counter("tier.succeeded", totals["succeeded"], tags),
        _counter("tier.routed", routed_on, tags),
        _counter("tier.parked", parked, tags),
        _counter("tier.dropped", totals["dropped"], tags),
        _counter("tier.untrusted_replay_headers", sum(p.untrusted_replays for p in summary.partitions), tags),
        _counter("tier.handler_errors", totals["drained"] - totals["succeeded"], tags),
        _counter("tier.handler_calls", sum(p.handler_calls for p in summary.partitions), tags),
        _counter("tier.bisection_calls", sum(p.extra_handler_calls for p in summary.partitions), tags),
        Metric(
            "timer", f"{PREFIX}.tier.run_duration", max(0, summary.finished_ms - summary.started_ms), tags
        ),
    ]
    metrics += [
        _counter("tier.dead_lettered", n, tags, dlt_topic=topic) for topic, n in sorted(to_dlts.items())
    ]
    metrics += _distribution("handler_batch_time", summary.handler_time(), tags)
    metrics += _distribution("lateness", summary.lateness(), tags)
    return metrics


def backlog_metrics(peek: TierPeek, topology: Topology, tier: Tier, now_ms: int) -> list[Metric]:
    """
    The two figures an on-call alert needs.

    Records pending in the tier, and how long the oldest due one has waited past its due time (ms; 0 when none
    is due).
    """
    return peek_gauges(peek, topology.topic, tier.index, now_ms)


def peek_gauges(peek: TierPeek, topology_topic: str, tier_index: int, now_ms: int) -> list[Metric]:
    """:func:`backlog_metrics` by names (what an event trigger knows of its tier)."""
    tags = tier_tags(topology_topic, peek.topic, tier_index)
    return [
        Metric("gauge", f"{PREFIX}.tier.backlog", peek.backlog, tags),
        Metric("gauge", f"{PREFIX}.tier.oldest_due_age_ms", peek.oldest_due_age_ms(now_ms), tags),
    ]


def ordering_gauges(state: OrderState, topology_topic: str, now_ms: int) -> list[Metric]:
    """
    The key-order gauges of each partition (``ordering: key``), zeros included.

    ``kafka_retry.ordering.blocked_keys`` (keys blocked), ``.held_records`` (records waiting behind them) and
    ``.oldest_hold_age_s`` (how long the longest-waiting held record has waited; 0 when none waits),
    tagged ``topology`` and ``partition``.
    """
    metrics = []
    for part in state.partitions:
        tags = {"topology": topology_topic, "partition": str(part.partition)}
        held_since = [h.held_ms for e in part.entries.values() for h in e.held]
        age_s = max(0.0, (now_ms - min(held_since)) / 1000) if held_since else 0.0
        metrics += [
            Metric("gauge", f"{PREFIX}.ordering.blocked_keys", len(part.entries), tags),
            Metric("gauge", f"{PREFIX}.ordering.held_records", len(held_since), dict(tags)),
            Metric("gauge", f"{PREFIX}.ordering.oldest_hold_age_s", round(age_s, 3), dict(tags)),
        ]
    return metrics


def sanitize_tag(value: str) -> str:
    """
    A tag value safe in every metrics format.

    ``[A-Za-z0-9_.$-]`` (others become ``_``), at most 100 characters; ``unknown`` when nothing is left.
    """
    return _NOT_TAG.sub("_", value)[:_TAG_LENGTH] or "unknown"


def named_tags(topology: Topology) -> set[str]:
    """The tags of the exception classes the topology names (classification, DLT routing): always kept."""
    named = {sanitize_tag(c) for c in (*topology.not_retryable, *topology.retry_only)}
    return named | {sanitize_tag(c) for _, classes in topology.dlt_routing for c in classes}


def exception_tags(
    topology: Topology,
    found: Mapping[str, int],
    admitted: Collection[str] = (),
    *,
    cap: int = MAX_EXCEPTION_TAGS,
) -> dict[str, str]:
    """
    The tag of each exception class in ``found`` (class -> records).

    Its sanitized name when the topology names it (classification, DLT routing), it was ``admitted``
    before, or fewer than ``cap`` were admitted so far (the most frequent first); else :data:`OTHER`.
    The topology's own classes never count against ``cap``, even when ``admitted`` holds them.
    """
    named = named_tags(topology)
    kept = set(admitted) - named
    tags = {}
    for raw, _ in sorted(found.items(), key=lambda item: (-item[1], item[0])):
        tag = sanitize_tag(raw)
        if tag not in named and tag not in kept:
            if len(kept) >= cap:
                tags[raw] = OTHER
                continue
            kept.add(tag)
        tags[raw] = tag
    return tags


def dlt_watch_metrics(
    topology: Topology, new_records: Mapping[tuple[str, str, str], int], tags: Mapping[str, str]
) -> list[Metric]:
    """
    New dead letters the watch found, per ``(DLT topic, dead-letter family, exception tag)``.

    ``tags``: exception class -> tag, from :func:`exception_tags`. The family is one of six names
    (``policy/dead_letters/families.FAMILIES``): it adds no more than six values per DLT.
    """
    counts: Counter[tuple[str, str, str]] = Counter()
    for (topic, family, exception), n in new_records.items():
        counts[(sanitize_tag(topic), sanitize_tag(family), tags.get(exception, OTHER))] += n
    base = {"topology": topology.topic}
    return [
        _counter("dlt.new_records", n, base, dlt_topic=topic, family=family, exception=exception)
        for (topic, family, exception), n in sorted(counts.items())
    ]


def emit(metrics: Iterable[Metric]) -> int:
    """
    Send ``metrics`` through Airflow's ``Stats``; returns how many were sent.

    A failure is logged, never raised: metrics must not fail a run that did its work.
    """
    sent = 0
    try:
        from airflow.sdk.observability.stats import Stats

        for metric in metrics:
            tags = dict(metric.tags)
            if metric.kind == "counter":
                Stats.incr(metric.name, int(metric.value), tags=tags)
            elif metric.kind == "timer":
                Stats.timing(metric.name, metric.value, tags=tags)
            else:
                Stats.gauge(metric.name, metric.value, tags=tags)
            sent += 1
    except Exception as exc:  # observability never fails the task
        log.warning("could not send metrics (%s sent): %s: %s", sent, type(exc).__name__, exc)
    return sent


def emit_tier_backlog(peek: TierPeek, topology: Topology, tier: Tier, *, now_ms: int | None = None) -> int:
    """Send the backlog gauges of ``tier`` from a peek (the tier-due sensor's, or a trigger's)."""
    if now_ms is None:
        from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

        now_ms = wall_clock_ms()
    return emit(backlog_metrics(peek, topology, tier, now_ms))
