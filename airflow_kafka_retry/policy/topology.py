"""
The retry topology of one main topic: validated model, tiers, DLT topics and YAML loading.

A topology turns (attempts, back-off, suffixing, same-interval reuse, DLT routing) into the ordered
tiers a record travels through: the main topic (tier 0), the retry tiers (1..n) and the
dead-letter topic(s). The names follow :mod:`.naming` (Spring's ``DestinationTopicPropertiesFactory``);
``compat:`` fills in a Spring version's defaults (:mod:`.compat`). Validation reports every problem
of a topology at once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields as dataclass_fields
from pathlib import Path
from typing import Any, Literal

from airflow_kafka_retry.policy.backoff import BackOff
from airflow_kafka_retry.policy.classify import DEFAULT_NOT_RETRYABLE, ExceptionClassifier, is_dotted_name
from airflow_kafka_retry.policy.compat import COMPAT_NAMES, apply_preset, describe_presets, preset
from airflow_kafka_retry.policy.durations import parse_duration_ms
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.header_policy import HeaderPolicy
from airflow_kafka_retry.policy.naming import (
    DLT_ROUTING_NAMINGS,
    SUFFIXINGS,
    DltRoutingNaming,
    NamingError,
    dlt_routing_suffix,
    retry_topics,
)

DltStrategy = Literal["always_retry_on_error", "fail_on_error", "no_dlt"]
TierKind = Literal["main", "retry", "dlt"]

_TOPIC_NAME = re.compile(r"^(?!\.{1,2}$)[a-zA-Z0-9._-]{1,249}$")  # Kafka also refuses "." and ".."
MAX_ATTEMPTS = 32_766  # the DLT record carries attempts + 1, and Spring reads at most Short.MAX_VALUE
_DLT_STRATEGIES = ("always_retry_on_error", "fail_on_error", "no_dlt")
DEFAULT_TIER_GROUP_TEMPLATE = "{group_id}-{topic}"


@dataclass(frozen=True)
class Tier:
    """
    One topic on the retry path.

    :param index: 0 for the main topic, 1..n for retry tiers, -1 for dead-letter topics.
    :param topic: the Kafka topic name.
    :param delay_ms: how long a record waits before it is due in this tier (0 for main and DLTs).
    :param kind: ``main``, ``retry`` or ``dlt``.
    :param reusable: a retry tier that takes several attempts (Spring's same-interval reuse).
    """

    index: int
    topic: str
    delay_ms: int
    kind: TierKind
    reusable: bool = False


@dataclass(frozen=True)
class Topology:
    """
    A validated retry topology. Build it with :meth:`from_mapping` or :func:`load_topology`.

    ``compat`` presets are applied to the mapping (keys it does not set); constructed directly, a
    topology only records ``compat`` (it picks how 2.7's same-interval reuse behaves) and applies
    no defaults. ``compat_applied`` lists the keys the preset set.
    """

    topic: str
    group_id: str
    attempts: int = 3
    backoff: BackOff = field(default_factory=BackOff)
    topic_suffixing: Literal["index", "delay"] = "index"
    index_start: int = 1
    retry_suffix: str = "-retry"
    dlt_suffix: str = "-dlt"
    parking_suffix: str = "-parking"
    reuse_same_interval: bool = False
    not_retryable: tuple[str, ...] = ()
    default_not_retryable: bool = True
    retry_only: tuple[str, ...] = ()
    traverse_causes: bool = True
    dlt_routing: tuple[tuple[str, tuple[str, ...]], ...] = ()
    dlt_strategy: DltStrategy = "always_retry_on_error"
    timeout_ms: int | None = None
    headers: HeaderPolicy = field(default_factory=HeaderPolicy)
    tier_group_template: str = DEFAULT_TIER_GROUP_TEMPLATE
    dlt_routing_naming: DltRoutingNaming = "suffix"
    compat: str = "none"
    compat_applied: tuple[str, ...] = field(default=(), compare=False)
    source: str = "<python>"
    tiers: tuple[Tier, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        errors = self._validate()
        if errors:
            raise TopologyError.combine(errors)
        try:
            object.__setattr__(self, "tiers", self._build_tiers())
        except NamingError as exc:
            raise self._error(str(exc), "reuse_same_interval") from None
        errors = self._validate_topic_names()
        if errors:
            raise TopologyError.combine(errors)

    def _validate_topic_names(self) -> list[TopologyError]:
        routing_fields = [f"dlt_routing.{suffix}" for suffix, _ in self.dlt_routing]
        fields = [
            "topic",
            *(["retry_suffix"] * len(self.retry_tiers)),
            *(["dlt_suffix", *routing_fields] if self.dlt_tiers else []),
        ]
        seen: dict[str, str] = {}
        errors: list[TopologyError] = []
        for tier, field_name in zip((*self.tiers, *self.dlt_tiers), fields, strict=True):
            if any(e.field == field_name for e in errors):
                pass  # one problem per field: the first derived name that shows it
            elif not _TOPIC_NAME.match(tier.topic):
                errors.append(
                    self._error(
                        f"derived topic name {tier.topic!r} is not a legal Kafka topic name "
                        "(1-249 characters from a-z A-Z 0-9 . _ -)",
                        field_name,
                    )
                )
            elif tier.topic in seen:
                errors.append(
                    self._error(
                        f"derived topic name {tier.topic!r} is also the {seen[tier.topic]} "
                        "topic; every tier and DLT needs its own topic",
                        field_name,
                    )
                )
            seen.setdefault(
                tier.topic, f"{tier.kind} tier {tier.index}" if tier.kind != "dlt" else "dead-letter"
            )
        parking = self.parking_topic
        if parking is not None and not _TOPIC_NAME.match(parking):
            errors.append(
                self._error(
                    f"derived topic name {parking!r} is not a legal Kafka topic name "
                    "(1-249 characters from a-z A-Z 0-9 . _ -)",
                    "parking_suffix",
                )
            )
        elif parking is not None and parking in seen:
            errors.append(
                self._error(
                    f"derived topic name {parking!r} is also the {seen[parking]} topic; the "
                    "parking topic needs its own topic",
                    "parking_suffix",
                )
            )
        return errors

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "<python>") -> Topology:
        """Build a topology from a parsed YAML/JSON mapping; every error names ``source`` and the field."""
        return _from_mapping(data, source=source)

    def _error(self, problem: str, field_name: str) -> TopologyError:
        return TopologyError(problem, field=field_name, source=self.source)

    def _validate(self) -> list[TopologyError]:
        errors: list[TopologyError] = []

        def fail(problem: str, field_name: str) -> None:
            errors.append(self._error(problem, field_name))

        if not isinstance(self.topic, str) or not _TOPIC_NAME.match(self.topic):
            fail(f"{self.topic!r} is not a legal Kafka topic name", "topic")
        if not isinstance(self.group_id, str) or not self.group_id.strip():
            fail("a non-empty consumer group id is required", "group_id")
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or not 1 <= self.attempts <= MAX_ATTEMPTS
        ):
            fail(
                f"must be an integer from 1 to {MAX_ATTEMPTS} (total attempts, first included), "
                f"got {self.attempts!r}",
                "attempts",
            )
        if self.topic_suffixing not in SUFFIXINGS:
            fail(f"must be one of {', '.join(SUFFIXINGS)}, got {self.topic_suffixing!r}", "topic_suffixing")
        if self.dlt_strategy not in _DLT_STRATEGIES:
            fail(f"must be one of {', '.join(_DLT_STRATEGIES)}, got {self.dlt_strategy!r}", "dlt_strategy")
        if isinstance(self.index_start, bool) or self.index_start not in (0, 1):
            fail(f"must be 0 (Spring's naming) or 1, got {self.index_start!r}", "index_start")
        if self.compat not in COMPAT_NAMES:
            fail(
                f"must be one of {', '.join(COMPAT_NAMES)}, got {self.compat!r}: {describe_presets()}",
                "compat",
            )
        if self.dlt_routing_naming not in DLT_ROUTING_NAMINGS:
            fail(
                f"must be one of {', '.join(DLT_ROUTING_NAMINGS)}, got {self.dlt_routing_naming!r}",
                "dlt_routing_naming",
            )
        for name, value in (
            ("retry_suffix", self.retry_suffix),
            ("dlt_suffix", self.dlt_suffix),
            ("parking_suffix", self.parking_suffix),
        ):
            if not isinstance(value, str) or not value:
                fail("must be a non-empty string", name)
        if self.retry_suffix == self.dlt_suffix:
            fail("retry_suffix and dlt_suffix must differ", "dlt_suffix")
        if self.not_retryable and self.retry_only:
            fail("set either not_retryable or retry_only, not both (as in Spring)", "retry_only")
        for key in ("not_retryable", "retry_only"):
            for i, name in enumerate(getattr(self, key)):
                if not isinstance(name, str) or not is_dotted_name(name):
                    fail(f"{name!r} is not a dotted exception class path", f"{key}[{i}]")
        seen_suffixes: set[str] = set()
        for suffix, classes in self.dlt_routing:
            where = f"dlt_routing.{suffix}"
            if self.dlt_strategy == "no_dlt":
                fail("exception-specific DLTs make no sense with dlt_strategy: no_dlt", where)
            if self.compat == "spring-2.7":
                fail(
                    "Spring Kafka 2.7 to 3.1 has no exception-based DLT routing (it arrived in 3.2); use "
                    "compat: spring-builder-4.0 or spring-3.2, or drop dlt_routing",
                    where,
                )
            routed = dlt_routing_suffix(suffix, dlt_suffix=self.dlt_suffix, naming=self.dlt_routing_naming)
            if suffix in seen_suffixes or routed == self.dlt_suffix:
                fail(f"suffix {suffix!r} is used twice", where)
            seen_suffixes.add(suffix)
            if not classes:
                fail("list at least one exception class", where)
            for i, name in enumerate(classes):
                if not isinstance(name, str) or not is_dotted_name(name):
                    fail(f"{name!r} is not a dotted exception class path", f"{where}[{i}]")
        if self.timeout_ms is not None and self.timeout_ms <= 0:
            fail("must be a positive duration", "timeout")
        errors.extend(self._validate_group_template())
        return errors

    def _validate_group_template(self) -> list[TopologyError]:
        template = self.tier_group_template
        if not isinstance(template, str) or ("{group_id}" not in template and "{topic}" not in template):
            return [
                self._error(
                    f"must be a string containing {{group_id}} or {{topic}}, got {template!r}",
                    "tier_group_template",
                )
            ]
        try:
            template.format(group_id="g", topic="t", suffix="-s")
        except (KeyError, IndexError, ValueError) as exc:
            return [
                self._error(
                    f"{template!r} is not a valid template; only {{group_id}}, {{topic}} and "
                    f"{{suffix}} may be used ({type(exc).__name__}: {exc})",
                    "tier_group_template",
                )
            ]
        return []

    def _build_tiers(self) -> tuple[Tier, ...]:
        topics = retry_topics(
            self.backoff.delays_for(self.attempts - 1),
            retry_suffix=self.retry_suffix,
            suffixing=self.topic_suffixing,
            index_start=self.index_start,
            reuse=self.reuse_same_interval,
            reuse_scope=preset(self.compat).reuse_scope,
        )
        tiers = [Tier(0, self.topic, 0, "main")]
        tiers += [
            Tier(i, f"{self.topic}{t.suffix}", t.delay_ms, "retry", reusable=t.reusable)
            for i, t in enumerate(topics, start=1)
        ]
        return tuple(tiers)

    # ------------------------------------------------------------------ queries
    @property
    def retry_tiers(self) -> tuple[Tier, ...]:
        return self.tiers[1:]

    @property
    def dlt_topic(self) -> str | None:
        """The main dead-letter topic, or None under ``dlt_strategy: no_dlt``."""
        return None if self.dlt_strategy == "no_dlt" else f"{self.topic}{self.dlt_suffix}"

    @property
    def dlt_tiers(self) -> tuple[Tier, ...]:
        if self.dlt_strategy == "no_dlt":
            return ()
        main = Tier(-1, f"{self.topic}{self.dlt_suffix}", 0, "dlt")
        return (main, *(Tier(-1, topic, 0, "dlt") for topic, _ in self.exception_dlts))

    @property
    def exception_dlts(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The exception-specific DLTs in routing order: (topic, exception classes)."""
        naming = self.dlt_routing_naming
        return tuple(
            (f"{self.topic}{dlt_routing_suffix(key, dlt_suffix=self.dlt_suffix, naming=naming)}", classes)
            for key, classes in self.dlt_routing
        )

    @property
    def parking_topic(self) -> str | None:
        """
        Where a replayed DLT record that fails again ends (``<topic><parking_suffix>``); None under no_dlt.

        Parking keeps a record from looping between a replay and the DLT: the DLT is for first
        failures, the parking topic for records that failed again after a replay.
        """
        return None if self.dlt_strategy == "no_dlt" else f"{self.topic}{self.parking_suffix}"

    @property
    def _default_fatal(self) -> tuple[str, ...]:
        """The default fatal exceptions, unless ``default_not_retryable: false`` turned them off."""
        return DEFAULT_NOT_RETRYABLE if self.default_not_retryable else ()

    @property
    def classifier(self) -> ExceptionClassifier:
        return ExceptionClassifier(
            not_retryable=(*self._default_fatal, *self.not_retryable),
            retry_only=self.retry_only,
            traverse_causes=self.traverse_causes,
            always_traversed=self._default_fatal,
        )

    @property
    def dlt_classifier(self) -> ExceptionClassifier:
        """
        What is fatal when a record fails while its DLT is reprocessed: only the default fatal list.

        As Spring's resolver-wide classifier: the topology's own ``not_retryable`` classes keep a
        record out of the retry tiers, but under ``always_retry_on_error`` they send a failed DLT
        record back to the DLT rather than giving it up.
        """
        return ExceptionClassifier(not_retryable=self._default_fatal, always_traversed=self._default_fatal)

    def tier(self, index: int) -> Tier:
        """The tier with this index (0 = main topic); a TopologyError names the valid range."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.tiers):
            raise TopologyError(
                f"tier {index!r} does not exist; valid tiers are 0 (main topic {self.topic!r}) "
                f"to {len(self.tiers) - 1}",
                field="tier",
                source=self.source,
            )
        return self.tiers[index]

    def select(self, spec: int | str) -> Tier:
        """A tier by index (``2``, ``"2"``), by topic name, or ``"dlt"`` for the main dead-letter topic."""
        if isinstance(spec, bool):
            raise TopologyError(
                f"tier {spec!r} is not a tier index, topic name or 'dlt'", field="tier", source=self.source
            )
        if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
            return self.tier(int(spec))
        if spec == "dlt":
            if not self.dlt_tiers:
                raise TopologyError(
                    "this topology has no DLT (dlt_strategy: no_dlt)", field="tier", source=self.source
                )
            return self.dlt_tiers[0]
        return self.tier_for_topic(spec)

    def destinations_from(self, tier: Tier) -> list[str]:
        """Every topic a failed record of ``tier`` can be routed to (next tier, DLTs, parking)."""
        following = self.next_tier(tier)
        topics = [following.topic] if following is not None else []
        topics += [t.topic for t in self.dlt_tiers if t.topic not in topics]
        if self.parking_topic is not None:
            topics.append(self.parking_topic)
        return topics

    def tier_for_topic(self, topic: str) -> Tier:
        """The tier (retry or DLT) that ``topic`` is; a TopologyError when the topology has no such topic."""
        for tier in (*self.tiers, *self.dlt_tiers):
            if tier.topic == topic:
                return tier
        known = ", ".join(t.topic for t in (*self.tiers, *self.dlt_tiers))
        raise TopologyError(
            f"topic {topic!r} is not on this retry path ({known})", field="topic", source=self.source
        )

    def next_tier(self, tier: Tier) -> Tier | None:
        """Where a retryable failure in ``tier`` goes: the following tier, the same reusable tier, or None."""
        if tier.kind == "retry" and tier.reusable:
            return tier
        if tier.kind == "dlt" or tier.index + 1 >= len(self.tiers):
            return None
        return self.tiers[tier.index + 1]

    def consumer_group(self, tier: Tier) -> str:
        """
        The consumer group that drains ``tier``; the main topic keeps the service's own group.

        ``{suffix}`` is what the tier's topic adds to the main topic, so ``{group_id}{suffix}`` is
        Spring's retry listener group (``SuffixingRetryTopicNamesProviderFactory.getGroupId``).
        """
        if tier.kind == "main":
            return self.group_id
        suffix = tier.topic[len(self.topic) :]
        return self.tier_group_template.format(group_id=self.group_id, topic=tier.topic, suffix=suffix)

    def _compat_dict(self) -> dict[str, Any]:
        """Which preset applied, what it matches, and each of its keys: set by it or by the file."""
        chosen = preset(self.compat)
        keys = [
            f"headers.{k}" if name == "headers" else name
            for name, value in chosen.defaults.items()
            for k in (value if name == "headers" else [name])
        ]
        values = {
            **{f.name: getattr(self, f.name) for f in dataclass_fields(self)},
            **{f"headers.{k}": v for k, v in self.headers.to_dict().items()},
        }
        return {
            "preset": self.compat,
            "matches": chosen.matches,
            "from_preset": {k: values[k] for k in keys if k in self.compat_applied},
            "overridden": {k: values[k] for k in keys if k not in self.compat_applied},
        }

    def to_dict(self) -> dict[str, Any]:
        """The resolved path as plain data (what ``topology show`` prints)."""
        return {
            "source": self.source,
            "compat": self._compat_dict(),
            "topic": self.topic,
            "group_id": self.group_id,
            "attempts": self.attempts,
            "backoff": {"kind": self.backoff.kind, "delays_ms": self.backoff.delays_for(self.attempts - 1)},
            "tiers": [
                {
                    "index": t.index,
                    "topic": t.topic,
                    "kind": t.kind,
                    "delay_ms": t.delay_ms,
                    "reusable": t.reusable,
                    "consumer_group": self.consumer_group(t),
                }
                for t in self.tiers
            ],
            "dlt": self.dlt_topic,
            "dlt_topics": [t.topic for t in self.dlt_tiers],
            "dlt_consumer_groups": {t.topic: self.consumer_group(t) for t in self.dlt_tiers},
            "dlt_routing": {topic: list(c) for topic, c in self.exception_dlts},
            "dlt_strategy": self.dlt_strategy,
            "parking": self.parking_topic,
            "timeout_ms": self.timeout_ms,
            "not_retryable": list(self.classifier.not_retryable),
            "retry_only": list(self.retry_only),
            "traverse_causes": self.traverse_causes,
            "headers": self.headers.to_dict(),
        }


# ---------------------------------------------------------------------- mapping -> model
_KEYS = (
    "topic",
    "group_id",
    "attempts",
    "backoff",
    "topic_suffixing",
    "index_start",
    "retry_suffix",
    "dlt_suffix",
    "parking_suffix",
    "reuse_same_interval",
    "not_retryable",
    "default_not_retryable",
    "retry_only",
    "traverse_causes",
    "dlt_routing",
    "dlt_strategy",
    "timeout",
    "headers",
    "tier_group_template",
    "compat",
    "dlt_routing_naming",
)
_BACKOFF_KEYS = {
    "fixed": ("kind", "delay"),
    "exponential": ("kind", "initial", "multiplier", "max"),
    "custom": ("kind", "delays"),
}


def _unknown_key_error(
    key: str, allowed: tuple[str, ...], field_prefix: str | None, source: str
) -> TopologyError:
    hint = difflib.get_close_matches(key, allowed, n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(allowed)}"
    path = f"{field_prefix}.{key}" if field_prefix else key
    return TopologyError(f"unknown key{suggestion}", field=path, source=source)


def _duration(value: object, field_name: str, source: str) -> int:
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        raise TopologyError(str(exc), field=field_name, source=source) from None


def _bool(value: object, field_name: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise TopologyError(f"must be true or false, got {value!r}", field=field_name, source=source)
    return value


def _names(value: object, field_name: str, source: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise TopologyError(
            f"must be a list of dotted exception class paths, got {value!r}", field=field_name, source=source
        )
    return tuple(value)


def _backoff(data: object, source: str) -> BackOff:
    if not isinstance(data, Mapping):
        raise TopologyError("must be a mapping with 'kind' and its settings", field="backoff", source=source)
    kind = data.get("kind", "fixed")
    if not isinstance(kind, str) or kind not in _BACKOFF_KEYS:
        raise TopologyError(
            f"must be fixed, exponential or custom, got {kind!r}", field="backoff.kind", source=source
        )
    errors = [
        _unknown_key_error(str(key), _BACKOFF_KEYS[kind], "backoff", source)
        for key in data
        if key not in _BACKOFF_KEYS[kind]
    ]

    def duration(value: object, field_name: str) -> int:
        try:
            return _duration(value, field_name, source)
        except TopologyError as exc:
            errors.append(exc)
            return 1

    backoff: BackOff | None = None
    try:
        if kind == "fixed":
            backoff = BackOff("fixed", delay_ms=duration(data.get("delay", 1000), "backoff.delay"))
        elif kind == "custom":
            raw = data.get("delays")
            if not isinstance(raw, list) or not raw:
                raise TopologyError(
                    "must be a non-empty list of durations", field="backoff.delays", source=source
                )
            delays = tuple(duration(v, f"backoff.delays[{i}]") for i, v in enumerate(raw))
            backoff = None if errors else BackOff("custom", delays=delays)
        else:
            multiplier = data.get("multiplier", 2.0)
            if (
                isinstance(multiplier, bool)
                or not isinstance(multiplier, int | float)
                or multiplier != multiplier
            ):
                errors.append(
                    TopologyError(
                        f"must be a number >= 1.0, got {multiplier!r}",
                        field="backoff.multiplier",
                        source=source,
                    )
                )
                multiplier = 2.0
            initial = duration(data.get("initial", 1000), "backoff.initial")
            maximum = duration(data.get("max", 30_000), "backoff.max")
            backoff = (
                None
                if errors
                else BackOff("exponential", initial_ms=initial, multiplier=float(multiplier), max_ms=maximum)
            )
    except ValueError as exc:
        errors.append(
            exc if isinstance(exc, TopologyError) else TopologyError(str(exc), field="backoff", source=source)
        )
    if errors or backoff is None:
        raise TopologyError.combine(errors)
    return backoff


def _dlt_routing(data: object, source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(data, Mapping):
        raise TopologyError(
            "must map a topic suffix (e.g. -validation-dlt) to exception classes",
            field="dlt_routing",
            source=source,
        )
    return tuple((str(k), _names(v, f"dlt_routing.{k}", source)) for k, v in data.items())


def _from_mapping(data: Mapping[str, Any], *, source: str) -> Topology:
    """Parse every key, collecting every problem; raise them together (one TopologyError)."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"a topology must be a mapping of keys, got {type(data).__name__}", source=source)
    errors: list[TopologyError] = []
    compat = data.get("compat", "none")
    if compat not in COMPAT_NAMES:
        errors.append(
            TopologyError(
                f"must be one of {', '.join(COMPAT_NAMES)}, got {compat!r}: {describe_presets()}",
                field="compat",
                source=source,
            )
        )
        compat = "none"
    data, applied = apply_preset(data, preset(compat))
    for key in data:
        if key not in _KEYS:
            errors.append(_unknown_key_error(str(key), _KEYS, None, source))
    kwargs: dict[str, Any] = {
        "topic": data.get("topic"),
        "group_id": data.get("group_id"),
        "source": source,
        "compat": compat,
        "compat_applied": tuple(applied),
    }
    for required in ("topic", "group_id"):
        if required not in data:
            errors.append(TopologyError("is required", field=required, source=source))
            kwargs[required] = "missing"

    def parse(key: str, parser: Any, *args: Any) -> None:
        try:
            kwargs[_KWARG.get(key, key)] = parser(*args)
        except TopologyError as exc:
            errors.append(exc)

    for key in (
        "attempts",
        "topic_suffixing",
        "index_start",
        "retry_suffix",
        "dlt_suffix",
        "parking_suffix",
        "dlt_strategy",
        "tier_group_template",
        "dlt_routing_naming",
    ):
        if key in data:
            kwargs[key] = data[key]
    for key in ("reuse_same_interval", "default_not_retryable", "traverse_causes"):
        if key in data:
            parse(key, _bool, data[key], key, source)
    for key in ("not_retryable", "retry_only"):
        if key in data and data[key] is not None:
            parse(key, _names, data[key], key, source)
    if "backoff" in data:
        parse("backoff", _backoff, data["backoff"], source)
    if data.get("dlt_routing"):
        parse("dlt_routing", _dlt_routing, data["dlt_routing"], source)
    if data.get("timeout") is not None:
        parse("timeout", _duration, data["timeout"], "timeout", source)
    if "headers" in data:
        try:
            kwargs["headers"] = HeaderPolicy.from_mapping(data["headers"])
        except TopologyError as exc:
            errors.append(exc.located(source=source, field_prefix="headers"))
    try:
        topology = Topology(**kwargs)
    except TopologyError as exc:
        reported = {e.field for e in errors}
        errors += [e for e in exc.errors if e.field not in reported]
    if errors:
        raise TopologyError.combine(errors)
    return topology


_KWARG = {"timeout": "timeout_ms"}


def load_topology(path: str | Path) -> Topology:
    """Load and validate a topology YAML file; a TopologyError names the file, field and problem."""
    import yaml  # local: the policy package stays importable without PyYAML for pure use

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise TopologyError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}", source=source) from None
    if data is None:
        raise TopologyError(
            "the file is empty; a topology needs at least 'topic' and 'group_id'", source=source
        )
    return Topology.from_mapping(data, source=source)
