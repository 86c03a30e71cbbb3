"""
The retry topology of one main topic: the validated model, its tiers and DLT topics.

A topology turns (attempts, back-off, suffixing, same-interval reuse, DLT routing) into the ordered
tiers a record travels through: the main topic (tier 0), the retry tiers (1..n) and the
dead-letter topic(s). The names follow :mod:`.topology.naming` (Spring's
``DestinationTopicPropertiesFactory``); ``compat:`` fills in a Spring version's defaults
(:mod:`.topology.compat`). Validation reports every problem of a topology at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields as dataclass_fields
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_retry.policy.classify import DEFAULT_NOT_RETRYABLE, ExceptionClassifier
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.header_policy import HeaderPolicy
from airflow_kafka_retry.policy.timing.backoff import BackOff
from airflow_kafka_retry.policy.topology.compat import preset
from airflow_kafka_retry.policy.topology.naming import (
    DltRoutingNaming,
    NamingError,
    dlt_routing_suffix,
    retry_topics,
)
from airflow_kafka_retry.policy.topology.ordering_checks import HOLD_SUFFIX, ORDER_STATE_SUFFIX

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letters.families import Family
    from airflow_kafka_retry.policy.dead_letters.queues import DeadLetterQueue
    from airflow_kafka_retry.policy.ordering.book import ReleaseOn
    from airflow_kafka_retry.policy.redrive.policies import RedrivePolicy
    from airflow_kafka_retry.policy.topology.input_lane import OnDue, TopologyInput
    from airflow_kafka_retry.policy.topology.ordering_checks import Ordering

DltStrategy = Literal["always_retry_on_error", "fail_on_error", "no_dlt"]
TierKind = Literal["main", "retry", "dlt"]

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
    A validated retry topology.

    Build it with :meth:`from_mapping` or :func:`~airflow_kafka_retry.policy.topology.file.load_topology`.

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
    input: TopologyInput | None = None
    on_due: OnDue = "handle"
    ordering: Ordering = "none"
    release_on: ReleaseOn = "dlt"
    dead_letter_queues: tuple[DeadLetterQueue, ...] = ()
    redrive: tuple[RedrivePolicy, ...] = ()
    compat_applied: tuple[str, ...] = field(default=(), compare=False)
    source: str = "<python>"
    tiers: tuple[Tier, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from airflow_kafka_retry.policy.topology.checks import (
            check_dead_letter_queues,
            check_settings,
            check_topic_names,
        )
        from airflow_kafka_retry.policy.topology.input_checks import check_sources
        from airflow_kafka_retry.policy.topology.ordering_checks import check_ordering
        from airflow_kafka_retry.policy.topology.redrive_checks import check_redrive

        errors = check_settings(self)
        if errors:
            raise TopologyError.combine(errors)
        try:
            object.__setattr__(self, "tiers", self._build_tiers())
        except NamingError as exc:
            raise self._error(str(exc), "reuse_same_interval") from None
        errors = [
            *check_topic_names(self),
            *check_dead_letter_queues(self),
            *check_sources(self),
            *check_ordering(self),
            *check_redrive(self),
        ]
        if errors:
            raise TopologyError.combine(errors)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "<python>") -> Topology:
        """Build a topology from a parsed YAML/JSON mapping; every error names ``source`` and the field."""
        from airflow_kafka_retry.policy.topology.mapping import topology_arguments

        kwargs, errors = topology_arguments(data, source=source)
        try:
            topology = cls(**kwargs)
        except TopologyError as exc:
            reported = {e.field for e in errors}
            errors += [e for e in exc.errors if e.field not in reported]
        if errors:
            raise TopologyError.combine(errors)
        return topology

    def _error(self, problem: str, field_name: str) -> TopologyError:
        """A problem of this topology's ``field_name``, naming its source."""
        return TopologyError(problem, field=field_name, source=self.source)

    def _build_tiers(self) -> tuple[Tier, ...]:
        topics = retry_topics(
            self.backoff.delays_for(self.attempts - 1),
            retry_suffix=self.retry_suffix,
            suffixing=self.topic_suffixing,
            index_start=self.index_start,
            reuse=self.reuse_same_interval,
            reuse_scope=preset(self.compat).reuse_scope,
        )
        # with an input (another framework's DLQ), that is tier 0: the provider drains it into the tiers
        tiers = [Tier(0, self.input.dlq if self.input is not None else self.topic, 0, "main")]
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
    def dead_letter_queue_topics(self) -> tuple[str, ...]:
        """The other frameworks' dead-letter queues the topology names (``dead_letter_queues``), in order."""
        return tuple(q.topic for q in self.dead_letter_queues)

    def queue_family(self, topic: str) -> Family | None:
        """What ``dead_letter_queues`` says headerless records of ``topic`` are (its ``family``), or None."""
        return next((q.family for q in self.dead_letter_queues if q.topic == topic), None)

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
                f"tier {index!r} does not exist; valid tiers are 0 (main topic {self.tiers[0].topic!r}) "
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

    @property
    def hold_topic(self) -> str | None:
        """Under ``ordering: key``, held records and the tiers' marks (``<topic>-hold``); else None."""
        return f"{self.topic}{HOLD_SUFFIX}" if self.ordering == "key" else None

    @property
    def order_state_topic(self) -> str | None:
        """Under ``ordering: key``, the compacted state of the blocked keys (``<topic>-order-state``)."""
        return f"{self.topic}{ORDER_STATE_SUFFIX}" if self.ordering == "key" else None

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
            "input": self.input.to_dict() if self.input is not None else None,
            "on_due": self.on_due,
            "ordering": self.ordering,
            "release_on": self.release_on,
            "hold_topic": self.hold_topic,
            "order_state_topic": self.order_state_topic,
            "dead_letter_queues": [q.to_dict() for q in self.dead_letter_queues],
            "redrive": [p.to_dict() for p in self.redrive],
        }
