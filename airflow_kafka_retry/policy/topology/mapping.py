"""
Reading a retry topology's mapping (parsed YAML or JSON, or Python) into the arguments of its model.

Every key is parsed and every problem collected, so that one
:class:`~airflow_kafka_retry.policy.errors.TopologyError` names them all (file, field, problem, and the
closest known key for a misspelt one). ``compat:`` presets fill in the keys the mapping does not set
(:mod:`.topology.compat`). :meth:`Topology.from_mapping
<airflow_kafka_retry.policy.topology.model.Topology.from_mapping>` builds the model from them;
:mod:`.topology.file` reads the files.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from airflow_kafka_retry.policy.dead_letters.queues import read_dead_letter_queues
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.header_policy import HeaderPolicy
from airflow_kafka_retry.policy.redrive.policies import read_redrive_policies
from airflow_kafka_retry.policy.timing.backoff import BackOff
from airflow_kafka_retry.policy.timing.durations import parse_duration_ms
from airflow_kafka_retry.policy.topology.compat import COMPAT_NAMES, apply_preset, describe_presets, preset
from airflow_kafka_retry.policy.topology.input_lane import parse_input

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
    "input",
    "on_due",
    "dead_letter_queues",
    "ordering",
    "release_on",
    "redrive",
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


def topology_arguments(data: Mapping[str, Any], *, source: str) -> tuple[dict[str, Any], list[TopologyError]]:
    """
    Parse every key: the model's keyword arguments, and every problem found (the model's own come next).

    Where a key fails, the arguments hold a stand-in (or leave it out), so that the model's checks still run.
    """
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
        "on_due",
        "ordering",
        "release_on",
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
    if data.get("input") is not None:
        parse("input", parse_input, data["input"], source)
    if data.get("dead_letter_queues") is not None:
        # the sound entries go on to the topology's checks, so every problem is reported at once
        kwargs["dead_letter_queues"], queue_errors = read_dead_letter_queues(
            data["dead_letter_queues"], source
        )
        errors += queue_errors
    if data.get("redrive") is not None:
        kwargs["redrive"], redrive_errors = read_redrive_policies(data["redrive"], source)
        errors += redrive_errors
    if data.get("timeout") is not None:
        parse("timeout", _duration, data["timeout"], "timeout", source)
    if "headers" in data:
        try:
            kwargs["headers"] = HeaderPolicy.from_mapping(data["headers"])
        except TopologyError as exc:
            errors.append(exc.located(source=source, field_prefix="headers"))
    return kwargs, errors


_KWARG = {"timeout": "timeout_ms"}
