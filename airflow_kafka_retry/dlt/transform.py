"""
The user's replay transform: loading it and checking what it returns.

A transform is ``package.module:function`` taking a :class:`~airflow_kafka_retry.dlt.records.DltRecord`
and returning it edited (``dataclasses.replace``), the same record, or None to leave it out of the
replay. Anything else -- an exception, another type, a key/value that is not bytes, malformed
headers, changed DLT coordinates -- is a :class:`ReplayError` naming the transform and the record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.engine.kafka.loading import UserCodeError, load_callable
from airflow_kafka_retry.policy.errors import ReplayError

Transform = Callable[[DltRecord], "DltRecord | None"]
_READ_ONLY = ("topic", "partition", "offset", "timestamp_ms")


def resolve_transform(name: str | None, allowed: Mapping[str, str] | None) -> str | None:
    """
    The ``package.module:function`` a replay runs for the transform it was given.

    With ``allowed`` (a replay DAG's ``transforms``: name -> ``package.module:function``, chosen by the
    DAG author) ``name`` must be one of its names; nothing is imported for any other value. Without it
    (the command line, whose user runs code anyway) ``name`` is the path itself.
    """
    if not name:
        return None
    if allowed is None:
        return name
    path = allowed.get(name)
    if path is None:
        names = ", ".join(sorted(allowed)) if allowed else "none"
        raise ReplayError(
            f"transform {name!r} is not one of this replay's transforms ({names}); the DAG "
            "author lists them as build_dlt_replay_dag(transforms={name: "
            "'package.module:function'})"
        )
    return path


def load_transform(path: str | None) -> Transform | None:
    """The transform at ``package.module:function``, or None when none is given."""
    if not path:
        return None
    try:
        return load_callable(path, what="transform")
    except UserCodeError as exc:
        raise ReplayError(str(exc)) from None


def apply_transform(transform: Transform | None, name: str | None, record: DltRecord) -> DltRecord | None:
    """Run ``transform`` on ``record`` and check the result; the record itself when there is no transform."""
    if transform is None:
        return record
    where = f"transform {name!r} on {record.coordinates}"
    try:
        result = transform(record)
    except Exception as exc:  # any failure of user code is bad input, reported with the record
        raise ReplayError(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if result is None:
        return None
    if not isinstance(result, DltRecord):
        raise ReplayError(
            f"{where} returned {type(result).__name__}; it must return the record (edited with "
            "dataclasses.replace) or None to leave it out"
        )
    changed = [f for f in _READ_ONLY if getattr(result, f) != getattr(record, f)]
    if changed:
        raise ReplayError(
            f"{where} changed {', '.join(changed)}: the DLT coordinates cannot be edited "
            "(edit key, value or headers)"
        )
    for field in ("key", "value"):
        value = getattr(result, field)
        if value is not None and not isinstance(value, bytes):
            raise ReplayError(
                f"{where} returned a {field} of type {type(value).__name__}; it must be bytes or None "
                "(encode it, e.g. json.dumps(...).encode())"
            )
    headers = result.headers
    if not isinstance(headers, tuple | list) or not all(
        isinstance(h, tuple | list)
        and len(h) == 2
        and isinstance(h[0], str)
        and (h[1] is None or isinstance(h[1], bytes))
        for h in headers
    ):
        raise ReplayError(
            f"{where} returned malformed headers; they must be a sequence of (str, bytes | None)"
        )
    return result
