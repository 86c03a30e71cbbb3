"""
Kafka clients a process keeps for its whole life: the key they are kept under, and what a fork does.

A copied librdkafka client has lost its threads; destroying it in a forked child (dropping the last
reference) aborts the process. That is what a ``subprocess`` with a ``preexec_fn`` (which runs the at-fork
hooks) would do before its ``exec``. So :func:`keep_inherited` gives each inherited client a reference that
is never released, not even when the interpreter shuts down; the child makes its own clients when it needs
them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Collection, Hashable, Mapping
from typing import Any

#: A forked child's copies of its parent's clients: never used and never destroyed there.
_INHERITED: list[Any] = []


def config_key(config: Mapping[str, Any], *, without: Collection[str] = ()) -> Hashable:
    """A hashable key of a client configuration (values that cannot be hashed by their repr)."""
    return tuple(sorted((k, _frozen(v)) for k, v in config.items() if k not in without))


def keep_inherited(client: Any) -> None:
    """In a forked child: never destroy this copy of a parent's client (see the module's docstring)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))
    _INHERITED.append(client)


def _frozen(value: Any) -> Hashable:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value
