"""Import user code named ``package.module:function`` (handlers, deserializers)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class UserCodeError(ValueError):
    """User code could not be loaded, or broke its contract; the message names it."""


def load_callable(path: str, *, what: str = "handler") -> Callable[..., Any]:
    """Return the callable at ``package.module:attribute`` (a dotted attribute path is allowed)."""
    if not isinstance(path, str) or ":" not in path:
        raise UserCodeError(f"{what} {path!r} must be given as 'package.module:function'")
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path:
        raise UserCodeError(f"{what} {path!r} must be given as 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # any import failure (a script's exit too)
        raise UserCodeError(
            f"{what} {path!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        if not hasattr(target, part):
            raise UserCodeError(f"{what} {path!r}: module {module_name!r} has no attribute {attr_path!r}")
        target = getattr(target, part)
    if not callable(target):
        raise UserCodeError(f"{what} {path!r} is not callable")
    return target
