"""
Spring-named topics next to a ``compat: none`` topology: the sign of a missed ``compat:`` preset.

A Spring service's retry path already on the broker (``orders-retry-1000``, ``orders-retry``,
``orders-retry-0``, ...) while the topology derives this provider's own names (``orders-retry-1``, ...)
means both sides would run separate retry paths. Pure: the caller lists the broker's topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.compat import COMPAT_NAMES
from airflow_kafka_retry.policy.topology.model import Topology


def _topics(topology: Topology) -> set[str]:
    return {t.topic for t in (*topology.tiers, *topology.dlt_tiers)}


def spring_named_topics(data: Mapping[str, Any], existing: Iterable[str]) -> dict[str, list[str]]:
    """
    For a ``compat: none`` topology mapping: preset -> broker topics it names that the topology does not.

    Empty when the topology sets a preset, or when no preset's names are on the broker.
    """
    if data.get("compat", "none") != "none":
        return {}
    on_broker = set(existing)
    own = _topics(Topology.from_mapping(data))
    found: dict[str, list[str]] = {}
    for name in COMPAT_NAMES:
        if name == "none":
            continue
        try:
            spring = Topology.from_mapping({**data, "compat": name})
        except TopologyError:
            continue  # a key this preset refuses (e.g. dlt_routing under spring-2.7)
        extra = sorted((_topics(spring) - own) & on_broker)
        if extra:
            found[name] = extra
    return found


def warning(found: Mapping[str, list[str]]) -> str | None:
    """The warning ``topology show`` prints for :func:`spring_named_topics`' result, or None."""
    if not found:
        return None
    named = sorted({t for topics in found.values() for t in topics})
    presets = ", ".join(f"compat: {p}" for p in found)
    return (
        f"compat: none, but the broker has Spring-named topics of this retry path: {', '.join(named)}; "
        f"a Spring service runs it with other names. Set the matching preset ({presets}) so both sides "
        "share one retry path"
    )
