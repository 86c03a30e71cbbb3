"""
The arguments the local and the Spark reprocess operators share, and their checks.

The templated fields, which run options have a parameter of their own or are derived, and the
conversions of ``cutoff`` and ``max_run``; pure functions, so a bad argument fails when the DAG is
parsed (or, templated, when the task renders it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.policy.timing.durations import duration_ms

#: Options named by their own operator parameters, not through ``options``.
OWN_PARAMETERS = ("handler", "value_deserializer", "key_deserializer")
#: Options the operator sets itself, from ``window`` and ``max_run``.
DERIVED_OPTIONS = {"deadline_ms": "window/max_run"}
#: Templated fields of both operators (each adds its own).
REPROCESS_TEMPLATE_FIELDS = (
    "topology",
    "tier",
    "handler",
    "value_deserializer",
    "key_deserializer",
    "kafka_conn_id",
    "options",
    "cutoff",
    "window",
    "timezone",
    "max_run",
)
#: ``cutoff="now"``: records due when the run starts draining (after waiting for its wave).
CUTOFF_NOW = "now"


def to_epoch_ms(value: Any) -> int:
    """Epoch milliseconds from an int/float (ms), a datetime (naive = UTC) or an ISO-8601/digit string."""
    if isinstance(value, bool):
        raise ValueError(
            f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}"
        )
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"cutoff {value!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    raise ValueError(f"cutoff must be epoch milliseconds, a datetime or an ISO-8601 string, got {value!r}")


def check_option_names(options: Mapping[str, Any]) -> None:
    """Refuse options that have their own parameter, that the operator derives, or that do not exist."""
    known = {f.name for f in dataclasses.fields(DrainOptions)} - set(OWN_PARAMETERS) - set(DERIVED_OPTIONS)
    own = sorted(set(options) & set(OWN_PARAMETERS))
    if own:
        raise ValueError(f"pass {', '.join(own)} as operator argument(s), not in options")
    derived = sorted(set(options) & set(DERIVED_OPTIONS))
    if derived:
        raise ValueError(
            f"option(s) {', '.join(derived)} are set by the operator: use "
            f"{', '.join(DERIVED_OPTIONS[d] for d in derived)} instead"
        )
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(known))}")


def max_run_ms(value: Any) -> int | None:
    """``max_run`` as milliseconds: a timedelta, a duration string (``"2h"``, ``"90m"``) or milliseconds."""
    if value is None or value == "":
        return None
    try:
        ms = duration_ms(value)
    except ValueError as exc:
        raise ValueError(f"max_run: {exc}") from None
    if ms <= 0:
        raise ValueError(f"max_run must be longer than 0, got {value!r}")
    return ms


def templated(*values: Any) -> bool:
    """True when any of ``values`` is a Jinja template (checked when the task renders it, not at parse)."""
    return any(isinstance(v, str) and ("{{" in v or "{%" in v) for v in values)
