"""
Validation of a retry topology: every problem of its settings and derived topic names, each naming its field.

:class:`~airflow_kafka_retry.policy.topology.model.Topology` runs these when it is built; each returns the
problems it found (none: an empty list), so that one error can report them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.classify import is_dotted_name
from airflow_kafka_retry.policy.topology.compat import COMPAT_NAMES, describe_presets
from airflow_kafka_retry.policy.topology.input_checks import check_input
from airflow_kafka_retry.policy.topology.naming import (
    DLT_ROUTING_NAMINGS,
    SUFFIXINGS,
    TOPIC_NAME,
    dlt_routing_suffix,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.errors import TopologyError
    from airflow_kafka_retry.policy.topology.shape import TopologyShape

MAX_ATTEMPTS = 32_766  # the DLT record carries attempts + 1, and Spring reads at most Short.MAX_VALUE
DLT_STRATEGIES = ("always_retry_on_error", "fail_on_error", "no_dlt")


def check_settings(t: TopologyShape) -> list[TopologyError]:
    """Every setting's problems, each naming its field (the group template's too)."""
    errors: list[TopologyError] = []

    def fail(problem: str, field_name: str) -> None:
        errors.append(t._error(problem, field_name))

    if not isinstance(t.topic, str) or not TOPIC_NAME.match(t.topic):
        fail(f"{t.topic!r} is not a legal Kafka topic name", "topic")
    if not isinstance(t.group_id, str) or not t.group_id.strip():
        fail("a non-empty consumer group id is required", "group_id")
    if isinstance(t.attempts, bool) or not isinstance(t.attempts, int) or not 1 <= t.attempts <= MAX_ATTEMPTS:
        fail(
            f"must be an integer from 1 to {MAX_ATTEMPTS} (total attempts, first included), "
            f"got {t.attempts!r}",
            "attempts",
        )
    if t.topic_suffixing not in SUFFIXINGS:
        fail(f"must be one of {', '.join(SUFFIXINGS)}, got {t.topic_suffixing!r}", "topic_suffixing")
    if t.dlt_strategy not in DLT_STRATEGIES:
        fail(f"must be one of {', '.join(DLT_STRATEGIES)}, got {t.dlt_strategy!r}", "dlt_strategy")
    if isinstance(t.index_start, bool) or t.index_start not in (0, 1):
        fail(f"must be 0 (Spring's naming) or 1, got {t.index_start!r}", "index_start")
    if t.compat not in COMPAT_NAMES:
        fail(
            f"must be one of {', '.join(COMPAT_NAMES)}, got {t.compat!r}: {describe_presets()}",
            "compat",
        )
    if t.dlt_routing_naming not in DLT_ROUTING_NAMINGS:
        fail(
            f"must be one of {', '.join(DLT_ROUTING_NAMINGS)}, got {t.dlt_routing_naming!r}",
            "dlt_routing_naming",
        )
    for name, value in (
        ("retry_suffix", t.retry_suffix),
        ("dlt_suffix", t.dlt_suffix),
        ("parking_suffix", t.parking_suffix),
    ):
        if not isinstance(value, str) or not value:
            fail("must be a non-empty string", name)
    if t.retry_suffix == t.dlt_suffix:
        fail("retry_suffix and dlt_suffix must differ", "dlt_suffix")
    if t.not_retryable and t.retry_only:
        fail("set either not_retryable or retry_only, not both (as in Spring)", "retry_only")
    for key in ("not_retryable", "retry_only"):
        for i, name in enumerate(getattr(t, key)):
            if not isinstance(name, str) or not is_dotted_name(name):
                fail(f"{name!r} is not a dotted exception class path", f"{key}[{i}]")
    seen_suffixes: set[str] = set()
    for suffix, classes in t.dlt_routing:
        where = f"dlt_routing.{suffix}"
        if t.dlt_strategy == "no_dlt":
            fail("exception-specific DLTs make no sense with dlt_strategy: no_dlt", where)
        if t.compat == "spring-2.7":
            fail(
                "Spring Kafka 2.7 to 3.1 has no exception-based DLT routing (it arrived in 3.2); use "
                "compat: spring-builder-4.0 or spring-3.2, or drop dlt_routing",
                where,
            )
        routed = dlt_routing_suffix(suffix, dlt_suffix=t.dlt_suffix, naming=t.dlt_routing_naming)
        if suffix in seen_suffixes or routed == t.dlt_suffix:
            fail(f"suffix {suffix!r} is used twice", where)
        seen_suffixes.add(suffix)
        if not classes:
            fail("list at least one exception class", where)
        for i, name in enumerate(classes):
            if not isinstance(name, str) or not is_dotted_name(name):
                fail(f"{name!r} is not a dotted exception class path", f"{where}[{i}]")
    if t.timeout_ms is not None and t.timeout_ms <= 0:
        fail("must be a positive duration", "timeout")
    errors.extend(check_group_template(t))
    errors.extend(check_input(t))
    return errors


def check_group_template(t: TopologyShape) -> list[TopologyError]:
    """The tier group template formats with only {group_id}, {topic} and {suffix}."""
    template = t.tier_group_template
    if not isinstance(template, str) or ("{group_id}" not in template and "{topic}" not in template):
        return [
            t._error(
                f"must be a string containing {{group_id}} or {{topic}}, got {template!r}",
                "tier_group_template",
            )
        ]
    try:
        template.format(group_id="g", topic="t", suffix="-s")
    except (KeyError, IndexError, ValueError) as exc:
        return [
            t._error(
                f"{template!r} is not a valid template; only {{group_id}}, {{topic}} and "
                f"{{suffix}} may be used ({type(exc).__name__}: {exc})",
                "tier_group_template",
            )
        ]
    return []


def check_topic_names(t: TopologyShape) -> list[TopologyError]:
    """Every derived topic name is legal in Kafka and used by one tier, DLT or parking topic only."""
    routing_fields = [f"dlt_routing.{suffix}" for suffix, _ in t.dlt_routing]
    fields = [
        "input.dlq" if t.input is not None else "topic",
        *(["retry_suffix"] * len(t.retry_tiers)),
        *(["dlt_suffix", *routing_fields] if t.dlt_tiers else []),
    ]
    seen: dict[str, str] = {}
    errors: list[TopologyError] = []
    for tier, field_name in zip((*t.tiers, *t.dlt_tiers), fields, strict=True):
        if any(e.field == field_name for e in errors):
            pass  # one problem per field: the first derived name that shows it
        elif not TOPIC_NAME.match(tier.topic):
            errors.append(
                t._error(
                    f"derived topic name {tier.topic!r} is not a legal Kafka topic name "
                    "(1-249 characters from a-z A-Z 0-9 . _ -)",
                    field_name,
                )
            )
        elif tier.topic in seen:
            errors.append(
                t._error(
                    f"derived topic name {tier.topic!r} is also the {seen[tier.topic]} "
                    "topic; every tier and DLT needs its own topic",
                    field_name,
                )
            )
        seen.setdefault(tier.topic, f"{tier.kind} tier {tier.index}" if tier.kind != "dlt" else "dead-letter")
    parking = t.parking_topic
    if parking is not None and not TOPIC_NAME.match(parking):
        errors.append(
            t._error(
                f"derived topic name {parking!r} is not a legal Kafka topic name "
                "(1-249 characters from a-z A-Z 0-9 . _ -)",
                "parking_suffix",
            )
        )
    elif parking is not None and parking in seen:
        errors.append(
            t._error(
                f"derived topic name {parking!r} is also the {seen[parking]} topic; the "
                "parking topic needs its own topic",
                "parking_suffix",
            )
        )
    return errors


def check_dead_letter_queues(t: TopologyShape) -> list[TopologyError]:
    """
    Each of ``dead_letter_queues`` is a legal topic of another framework, listed once.

    A queue may not be the topology's main topic (or its input), a retry tier, or one of its own DLTs or
    its parking topic (watched already): each problem names ``dead_letter_queues[i]``.
    """
    from airflow_kafka_retry.policy.dead_letters.queues import FIELD, QUEUE_FAMILIES, DeadLetterQueue

    own = {tier.topic: f"retry tier {tier.index}" for tier in t.retry_tiers}
    own[t.tiers[0].topic] = "input (tier 0)" if t.input is not None else "main topic (tier 0)"
    own.setdefault(t.topic, "main topic (the source of its input's dead letters)")
    watched = {tier.topic: "DLT" for tier in t.dlt_tiers}
    if t.parking_topic is not None:
        watched[t.parking_topic] = "parking topic"
    errors: list[TopologyError] = []
    first: dict[str, int] = {}
    for index, queue in enumerate(t.dead_letter_queues):
        where = f"{FIELD}[{index}]"
        if not isinstance(queue, DeadLetterQueue):
            errors.append(t._error(f"must be a DeadLetterQueue, got {queue!r}", where))
            continue
        topic = queue.topic
        if not isinstance(topic, str) or not TOPIC_NAME.match(topic):
            errors.append(
                t._error(
                    f"{topic!r} is not a legal Kafka topic name (1-249 characters from a-z A-Z 0-9 . _ -)",
                    f"{where}.topic",
                )
            )
        elif topic in own:
            errors.append(
                t._error(
                    f"{topic!r} is the topology's {own[topic]}, not a dead-letter queue: the topology "
                    "drains it itself; list only other frameworks' dead-letter topics here",
                    f"{where}.topic",
                )
            )
        elif topic in watched:
            errors.append(
                t._error(
                    f"{topic!r} is the topology's own {watched[topic]}, which the DLT watch, the view and "
                    "dlt inspect read already; list only other frameworks' dead-letter topics here",
                    f"{where}.topic",
                )
            )
        elif topic in first:
            errors.append(
                t._error(f"{topic!r} is listed twice (also {FIELD}[{first[topic]}])", f"{where}.topic")
            )
        else:
            first[topic] = index
        if queue.family is not None and queue.family not in QUEUE_FAMILIES:
            errors.append(
                t._error(
                    f"must be one of {', '.join(QUEUE_FAMILIES)} or None, got {queue.family!r}",
                    f"{where}.family",
                )
            )
    return errors
