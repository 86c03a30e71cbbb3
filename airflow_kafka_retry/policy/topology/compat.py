"""
``compat:`` presets: every topology default a Spring for Apache Kafka version uses.

A preset only fills in keys the topology does not set; explicit keys win. The defaults below were
read from Spring Kafka's sources (tag, file, line):

* ``@RetryableTopic`` defaults ``topicSuffixingStrategy = SUFFIX_WITH_DELAY_VALUE`` (every version),
  ``sameIntervalTopicReuseStrategy = MULTIPLE_TOPICS`` up to 3.1 (v3.1.10 RetryableTopic.java:187;
  2.7 has ``fixedDelayTopicStrategy = MULTIPLE_TOPICS``, v2.7.14 RetryableTopic.java:186) and
  ``SINGLE_TOPIC`` from 3.2 (v3.2.10 RetryableTopic.java:201, v4.1.1 :200).
* ``spring-2.7`` keeps 2.7's reuse (``FixedDelayStrategy.SINGLE_TOPIC``: a fixed back-off only);
  3.0.4 to 3.1 with ``SameIntervalTopicReuseStrategy.SINGLE_TOPIC`` collapse trailing repeats, as
  ``spring-builder-4.0`` with ``reuse_same_interval: true`` does.
* ``RetryTopicConfigurationBuilder``: ``MULTIPLE_TOPICS`` up to 4.0 (v4.0.7 :96), ``SINGLE_TOPIC`` from
  4.1 (v4.1.1 :97); delay suffixing in every version.
* Index suffixes count from 0 (``DestinationTopicPropertiesFactory.getTopicSuffix``, v3.2.10 :205).
* An exception-based DLT is ``<topic><key><dlt suffix>`` (v3.2.10 DestinationTopicPropertiesFactory.java:189).
* Retry listeners consume with the main group id plus the topic's suffix
  (``SuffixingRetryTopicNamesProviderFactory.getGroupId``, v3.2.10 :49-50, ``Suffixer.maybeAddTo``).
* ``traversingCauses`` defaults to false (v3.2.10 RetryableTopicAnnotationProcessor.java:138).
* ``kafka_exception-cause-fqcn`` is ``ErrorHandlingUtils.findRootCause``: the listener's own
  exception with only Spring's wrappers removed (v3.2.10 ErrorHandlingUtils.java:231-240), so
  ``headers.cause: handler`` (2.7.x writes no cause header; it appeared in 2.8.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.naming import ReuseScope

CompatName = Literal["none", "spring-3.2", "spring-2.7", "spring-builder-4.0", "spring-builder-4.1"]
SPRING_GROUP_TEMPLATE = "{group_id}{suffix}"


@dataclass(frozen=True)
class Preset:
    """
    One ``compat:`` value: the Spring configuration it matches and the topology defaults it sets.

    :param defaults: top-level topology keys and their values (``headers`` is a nested mapping).
    :param reuse_scope: how ``reuse_same_interval: true`` behaves (see :mod:`.topology.naming`).
    """

    name: CompatName
    matches: str
    defaults: Mapping[str, Any]
    reuse_scope: ReuseScope = "trailing"


def _spring(reuse: bool) -> dict[str, Any]:
    return {
        "topic_suffixing": "delay",
        "index_start": 0,
        "reuse_same_interval": reuse,
        "dlt_routing_naming": "key",
        "tier_group_template": SPRING_GROUP_TEMPLATE,
        "traverse_causes": False,
        "headers": {"cause": "handler"},
    }


PRESETS: dict[str, Preset] = {
    "none": Preset("none", "this provider's own defaults (orders-retry-1, orders-retry-2, ...)", {}),
    "spring-3.2": Preset(
        "spring-3.2",
        "@RetryableTopic defaults, Spring Kafka 3.2 and later (4.x included)",
        _spring(reuse=True),
    ),
    "spring-2.7": Preset(
        "spring-2.7",
        "@RetryableTopic or RetryTopicConfigurationBuilder defaults, Spring Kafka 2.7 to 3.1; a 3.0.4-3.1 "
        "service with SameIntervalTopicReuseStrategy.SINGLE_TOPIC needs spring-builder-4.0 with "
        "reuse_same_interval: true",
        _spring(reuse=False),
        reuse_scope="fixed_only",
    ),
    "spring-builder-4.0": Preset(
        "spring-builder-4.0",
        "RetryTopicConfigurationBuilder defaults, Spring Kafka 3.2 to 4.0",
        _spring(reuse=False),
    ),
    "spring-builder-4.1": Preset(
        "spring-builder-4.1",
        "RetryTopicConfigurationBuilder defaults, Spring Kafka 4.1 and later",
        _spring(reuse=True),
    ),
}
COMPAT_NAMES: tuple[str, ...] = tuple(PRESETS)


def describe_presets() -> str:
    """Every preset and the Spring configuration it matches, for an error that refuses a ``compat`` value."""
    return "; ".join(f"{p.name} ({p.matches})" for p in PRESETS.values())


def preset(name: str) -> Preset:
    """The preset called ``name``; ``KeyError`` when there is none."""
    return PRESETS[name]


def apply_preset(data: Mapping[str, Any], chosen: Preset) -> tuple[dict[str, Any], dict[str, Any]]:
    """
    ``data`` with the preset's defaults filled in, and the defaults that were actually used.

    Keys present in ``data`` are kept as written; ``headers`` is merged key by key.
    """
    merged = dict(data)
    applied: dict[str, Any] = {}
    for key, value in chosen.defaults.items():
        if key == "headers":
            given = data.get("headers", {})
            if not isinstance(given, Mapping):
                continue  # the headers validation reports it
            headers = dict(given)
            for sub, sub_value in value.items():
                if sub not in headers:
                    headers[sub] = sub_value
                    applied[f"headers.{sub}"] = sub_value
            merged["headers"] = headers
        elif key not in data:
            merged[key] = value
            applied[key] = value
    return merged, applied
