"""The retry topology of one main topic: validated model, tiers, DLT topics and YAML loading.

Like Spring's ``DestinationTopicPropertiesFactory``, a topology turns (attempts, back-off, suffixing,
same-interval reuse, DLT routing) into the ordered tiers a record travels through: the main topic
(tier 0), the retry tiers (1..n) and the dead-letter topic(s).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from airflow_kafka_retry.policy.backoff import BackOff
from airflow_kafka_retry.policy.classify import DEFAULT_NOT_RETRYABLE, ExceptionClassifier, is_dotted_name
from airflow_kafka_retry.policy.durations import parse_duration_ms
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.header_policy import HeaderPolicy

DltStrategy = Literal["always_retry_on_error", "fail_on_error", "no_dlt"]
TierKind = Literal["main", "retry", "dlt"]

_TOPIC_NAME = re.compile(r"^(?!\.{1,2}$)[a-zA-Z0-9._-]{1,249}$")  # Kafka also refuses "." and ".."
MAX_ATTEMPTS = 32_766  # the DLT record carries attempts + 1, and Spring reads at most Short.MAX_VALUE
_DLT_STRATEGIES = ("always_retry_on_error", "fail_on_error", "no_dlt")
_SUFFIXING = ("index", "delay")
DEFAULT_TIER_GROUP_TEMPLATE = "{group_id}-{topic}"


@dataclass(frozen=True)
class Tier:
    """One topic on the retry path.

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
    """A validated retry topology. Build it with :meth:`from_mapping` or :func:`load_topology`."""

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
    source: str = "<python>"
    tiers: tuple[Tier, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()
        object.__setattr__(self, "tiers", self._build_tiers())
        self._validate_topic_names()

    def _validate_topic_names(self) -> None:
        routing_fields = [f"dlt_routing.{suffix}" for suffix, _ in self.dlt_routing]
        fields = ["topic", *(["retry_suffix"] * len(self.retry_tiers)),
                  *(["dlt_suffix", *routing_fields] if self.dlt_tiers else [])]
        seen: dict[str, str] = {}
        for tier, field_name in zip((*self.tiers, *self.dlt_tiers), fields, strict=True):
            if not _TOPIC_NAME.match(tier.topic):
                raise self._error(f"derived topic name {tier.topic!r} is not a legal Kafka topic name "
                                  "(1-249 characters from a-z A-Z 0-9 . _ -)", field_name)
            if tier.topic in seen:
                raise self._error(f"derived topic name {tier.topic!r} is also the {seen[tier.topic]} topic; "
                                  "every tier and DLT needs its own topic", field_name)
            seen[tier.topic] = f"{tier.kind} tier {tier.index}" if tier.kind != "dlt" else "dead-letter"
        parking = self.parking_topic
        if parking is not None:
            if not _TOPIC_NAME.match(parking):
                raise self._error(f"derived topic name {parking!r} is not a legal Kafka topic name "
                                  "(1-249 characters from a-z A-Z 0-9 . _ -)", "parking_suffix")
            if parking in seen:
                raise self._error(f"derived topic name {parking!r} is also the {seen[parking]} topic; the parking "
                                  "topic needs its own topic", "parking_suffix")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "<python>") -> Topology:
        """Build a topology from a parsed YAML/JSON mapping; every error names ``source`` and the field."""
        return _from_mapping(data, source=source)

    def _error(self, problem: str, field_name: str) -> TopologyError:
        return TopologyError(problem, field=field_name, source=self.source)

    def _validate(self) -> None:
        if not isinstance(self.topic, str) or not _TOPIC_NAME.match(self.topic):
            raise self._error(f"{self.topic!r} is not a legal Kafka topic name", "topic")
        if not isinstance(self.group_id, str) or not self.group_id.strip():
            raise self._error("a non-empty consumer group id is required", "group_id")
        if (isinstance(self.attempts, bool) or not isinstance(self.attempts, int)
                or not 1 <= self.attempts <= MAX_ATTEMPTS):
            raise self._error(f"must be an integer from 1 to {MAX_ATTEMPTS} (total attempts, first included), "
                              f"got {self.attempts!r}", "attempts")
        if self.topic_suffixing not in _SUFFIXING:
            raise self._error(f"must be one of {', '.join(_SUFFIXING)}, got {self.topic_suffixing!r}",
                              "topic_suffixing")
        if self.dlt_strategy not in _DLT_STRATEGIES:
            raise self._error(f"must be one of {', '.join(_DLT_STRATEGIES)}, got {self.dlt_strategy!r}",
                              "dlt_strategy")
        if isinstance(self.index_start, bool) or self.index_start not in (0, 1):
            raise self._error(f"must be 0 (Spring's naming) or 1, got {self.index_start!r}", "index_start")
        for name, value in (("retry_suffix", self.retry_suffix), ("dlt_suffix", self.dlt_suffix),
                            ("parking_suffix", self.parking_suffix)):
            if not isinstance(value, str) or not value:
                raise self._error("must be a non-empty string", name)
        if self.retry_suffix == self.dlt_suffix:
            raise self._error("retry_suffix and dlt_suffix must differ", "dlt_suffix")
        if self.not_retryable and self.retry_only:
            raise self._error("set either not_retryable or retry_only, not both (as in Spring)", "retry_only")
        for key in ("not_retryable", "retry_only"):
            for i, name in enumerate(getattr(self, key)):
                if not isinstance(name, str) or not is_dotted_name(name):
                    raise self._error(f"{name!r} is not a dotted exception class path", f"{key}[{i}]")
        seen_suffixes: set[str] = set()
        for suffix, classes in self.dlt_routing:
            where = f"dlt_routing.{suffix}"
            if self.dlt_strategy == "no_dlt":
                raise self._error("exception-specific DLTs make no sense with dlt_strategy: no_dlt", where)
            if suffix in seen_suffixes or suffix == self.dlt_suffix:
                raise self._error(f"suffix {suffix!r} is used twice", where)
            seen_suffixes.add(suffix)
            if not classes:
                raise self._error("list at least one exception class", where)
            for i, name in enumerate(classes):
                if not isinstance(name, str) or not is_dotted_name(name):
                    raise self._error(f"{name!r} is not a dotted exception class path", f"{where}[{i}]")
        if self.timeout_ms is not None and self.timeout_ms <= 0:
            raise self._error("must be a positive duration", "timeout")
        self._validate_group_template()

    def _validate_group_template(self) -> None:
        template = self.tier_group_template
        if not isinstance(template, str) or ("{group_id}" not in template and "{topic}" not in template):
            raise self._error(f"must be a string containing {{group_id}} or {{topic}}, got {template!r}",
                              "tier_group_template")
        try:
            template.format(group_id="g", topic="t")
        except (KeyError, IndexError, ValueError) as exc:
            raise self._error(f"{template!r} is not a valid template; only {{group_id}} and {{topic}} may be "
                              f"used ({type(exc).__name__}: {exc})", "tier_group_template") from None

    def _build_tiers(self) -> tuple[Tier, ...]:
        delays = self.backoff.delays_for(self.attempts - 1)
        # Same-interval reuse: the trailing run of equal delays shares one retry topic.
        shared_from = len(delays)
        if self.reuse_same_interval and len(delays) > 1:
            shared_from = len(delays) - 1
            while shared_from > 0 and delays[shared_from - 1] == delays[-1]:
                shared_from -= 1
            if shared_from == len(delays) - 1:
                shared_from = len(delays)  # one trailing delay: nothing to share
        tier_delays = delays[: shared_from + 1] if shared_from < len(delays) else delays
        # Spring: with same-interval reuse, one retry topic left (every delay equal, or a single
        # retry) is named with the bare retry suffix.
        single_topic = self.reuse_same_interval and len(tier_delays) == 1
        # Spring: delay suffixing of a fixed back-off (several equal delays) falls back to indexes from 0.
        fixed_delay = len(delays) > 1 and len(set(delays)) == 1
        tiers = [Tier(0, self.topic, 0, "main")]
        for i, delay in enumerate(tier_delays):
            name = self._retry_topic_name(i, tier_delays, single_topic=single_topic, fixed_delay=fixed_delay)
            tiers.append(Tier(i + 1, name, delay, "retry", reusable=i == shared_from))
        return tuple(tiers)

    def _retry_topic_name(self, i: int, tier_delays: list[int], *, single_topic: bool, fixed_delay: bool) -> str:
        base = f"{self.topic}{self.retry_suffix}"
        if single_topic:
            return base
        if self.topic_suffixing == "index":
            return f"{base}-{i + self.index_start}"
        if fixed_delay:
            return f"{base}-{i}"
        same = [j for j, d in enumerate(tier_delays) if d == tier_delays[i]]
        if len(same) == 1:
            return f"{base}-{tier_delays[i]}"
        return f"{base}-{tier_delays[i]}-{same.index(i)}"

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
        return (main, *(Tier(-1, f"{self.topic}{suffix}", 0, "dlt") for suffix, _ in self.dlt_routing))

    @property
    def parking_topic(self) -> str | None:
        """Where a replayed DLT record that fails again ends (``<topic><parking_suffix>``); None under no_dlt.

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
        )

    @property
    def dlt_classifier(self) -> ExceptionClassifier:
        """What is fatal when a record fails while its DLT is reprocessed: only the default fatal list.

        As Spring's resolver-wide classifier: the topology's own ``not_retryable`` classes keep a
        record out of the retry tiers, but under ``always_retry_on_error`` they send a failed DLT
        record back to the DLT rather than giving it up.
        """
        return ExceptionClassifier(not_retryable=self._default_fatal, traverse_causes=self.traverse_causes)

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
            raise TopologyError(f"tier {spec!r} is not a tier index, topic name or 'dlt'", field="tier",
                                source=self.source)
        if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
            return self.tier(int(spec))
        if spec == "dlt":
            if not self.dlt_tiers:
                raise TopologyError("this topology has no DLT (dlt_strategy: no_dlt)", field="tier", source=self.source)
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
        raise TopologyError(f"topic {topic!r} is not on this retry path ({known})", field="topic", source=self.source)

    def next_tier(self, tier: Tier) -> Tier | None:
        """Where a retryable failure in ``tier`` goes: the following tier, the same reusable tier, or None."""
        if tier.kind == "retry" and tier.reusable:
            return tier
        if tier.kind == "dlt" or tier.index + 1 >= len(self.tiers):
            return None
        return self.tiers[tier.index + 1]

    def consumer_group(self, tier: Tier) -> str:
        """The consumer group that drains ``tier``; the main topic keeps the service's own group."""
        if tier.kind == "main":
            return self.group_id
        return self.tier_group_template.format(group_id=self.group_id, topic=tier.topic)

    def to_dict(self) -> dict[str, Any]:
        """The resolved path as plain data (what ``topology show`` prints)."""
        return {
            "source": self.source,
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
            "dlt_routing": {f"{self.topic}{s}": list(c) for s, c in self.dlt_routing},
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
    "topic", "group_id", "attempts", "backoff", "topic_suffixing", "index_start", "retry_suffix",
    "dlt_suffix", "parking_suffix", "reuse_same_interval", "not_retryable", "default_not_retryable", "retry_only",
    "traverse_causes", "dlt_routing", "dlt_strategy", "timeout", "headers", "tier_group_template",
)
_BACKOFF_KEYS = {
    "fixed": ("kind", "delay"),
    "exponential": ("kind", "initial", "multiplier", "max"),
    "custom": ("kind", "delays"),
}


def _unknown_key_error(key: str, allowed: tuple[str, ...], field_prefix: str | None, source: str) -> TopologyError:
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
        raise TopologyError(f"must be a list of dotted exception class paths, got {value!r}",
                            field=field_name, source=source)
    return tuple(value)


def _backoff(data: object, source: str) -> BackOff:
    if not isinstance(data, Mapping):
        raise TopologyError("must be a mapping with 'kind' and its settings", field="backoff", source=source)
    kind = data.get("kind", "fixed")
    if not isinstance(kind, str) or kind not in _BACKOFF_KEYS:
        raise TopologyError(f"must be fixed, exponential or custom, got {kind!r}", field="backoff.kind", source=source)
    for key in data:
        if key not in _BACKOFF_KEYS[kind]:
            raise _unknown_key_error(str(key), _BACKOFF_KEYS[kind], "backoff", source)
    try:
        if kind == "fixed":
            return BackOff("fixed", delay_ms=_duration(data.get("delay", 1000), "backoff.delay", source))
        if kind == "custom":
            raw = data.get("delays")
            if not isinstance(raw, list) or not raw:
                raise TopologyError("must be a non-empty list of durations", field="backoff.delays", source=source)
            delays = tuple(_duration(v, f"backoff.delays[{i}]", source) for i, v in enumerate(raw))
            return BackOff("custom", delays=delays)
        multiplier = data.get("multiplier", 2.0)
        if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or multiplier != multiplier:
            raise TopologyError(f"must be a number >= 1.0, got {multiplier!r}", field="backoff.multiplier",
                                source=source)
        return BackOff(
            "exponential",
            initial_ms=_duration(data.get("initial", 1000), "backoff.initial", source),
            multiplier=float(multiplier),
            max_ms=_duration(data.get("max", 30_000), "backoff.max", source),
        )
    except ValueError as exc:
        if isinstance(exc, TopologyError):
            raise
        raise TopologyError(str(exc), field="backoff", source=source) from None


def _dlt_routing(data: object, source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(data, Mapping):
        raise TopologyError("must map a topic suffix (e.g. -validation-dlt) to exception classes",
                            field="dlt_routing", source=source)
    return tuple((str(k), _names(v, f"dlt_routing.{k}", source)) for k, v in data.items())


def _from_mapping(data: Mapping[str, Any], *, source: str) -> Topology:
    if not isinstance(data, Mapping):
        raise TopologyError(f"a topology must be a mapping of keys, got {type(data).__name__}", source=source)
    for key in data:
        if key not in _KEYS:
            raise _unknown_key_error(str(key), _KEYS, None, source)
    for required in ("topic", "group_id"):
        if required not in data:
            raise TopologyError("is required", field=required, source=source)
    kwargs: dict[str, Any] = {"topic": data["topic"], "group_id": data["group_id"], "source": source}
    for key in ("attempts", "topic_suffixing", "index_start", "retry_suffix", "dlt_suffix", "parking_suffix",
                "dlt_strategy", "tier_group_template"):
        if key in data:
            kwargs[key] = data[key]
    for key in ("reuse_same_interval", "default_not_retryable", "traverse_causes"):
        if key in data:
            kwargs[key] = _bool(data[key], key, source)
    for key in ("not_retryable", "retry_only"):
        if key in data and data[key] is not None:
            kwargs[key] = _names(data[key], key, source)
    if "backoff" in data:
        kwargs["backoff"] = _backoff(data["backoff"], source)
    if "dlt_routing" in data and data["dlt_routing"]:
        kwargs["dlt_routing"] = _dlt_routing(data["dlt_routing"], source)
    if data.get("timeout") is not None:
        kwargs["timeout_ms"] = _duration(data["timeout"], "timeout", source)
    if "headers" in data:
        try:
            kwargs["headers"] = HeaderPolicy.from_mapping(data["headers"])
        except TopologyError as exc:
            raise exc.located(source=source, field_prefix="headers") from None
    return Topology(**kwargs)


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
        raise TopologyError("the file is empty; a topology needs at least 'topic' and 'group_id'", source=source)
    return Topology.from_mapping(data, source=source)
