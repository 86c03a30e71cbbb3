"""
Exception classification: retryable or fatal, and which exception-specific DLT.

Exceptions are named by dotted class path (``json.JSONDecodeError``, ``myapp.errors.InvalidOrder``)
and matched by subclass. A name is resolved by import when its module is importable here; otherwise
it is compared with the dotted names of every class in the exception's MRO, so the scheduler does
not need the handler's packages installed to classify correctly on the worker.
"""

from __future__ import annotations

import builtins
import importlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from airflow_kafka_retry.errors import UnisolatedFailure

# The Python analogues of Spring's default fatal exceptions (DeserializationException,
# MessageConversionException, ConversionException, MethodArgumentResolutionException,
# NoSuchMethodException, ClassCastException): decoding and type errors that a retry cannot fix.
DEFAULT_NOT_RETRYABLE: tuple[str, ...] = (
    "airflow_kafka_retry.errors.DeserializationError",
    "json.JSONDecodeError",
    "UnicodeDecodeError",
    "TypeError",
    "AttributeError",
    "NotImplementedError",
    "ImportError",
)

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_dotted_name(name: str) -> bool:
    """True when ``name`` looks like a (possibly dotted) Python class path."""
    return bool(_DOTTED.match(name))


def exception_chain(exc: BaseException, *, traverse_causes: bool) -> Iterator[BaseException]:
    """Yield ``exc`` and, when asked, its ``__cause__`` / ``__context__`` chain (cycle-safe)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        yield current
        if not traverse_causes:
            return
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def class_path(cls: type) -> str:
    """``module.QualName`` of a class; builtins are spelled bare (``ValueError``)."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@lru_cache(maxsize=512)
def _resolve(name: str) -> type | None:
    """The class a dotted name points at, or None when it cannot be imported here."""
    if "." not in name:
        found = getattr(builtins, name, None)
        return found if isinstance(found, type) else None
    module_name, _, attr = name.rpartition(".")
    try:
        target: object = importlib.import_module(module_name)
    except Exception:  # an unimportable module means "compare by name"
        parent = _resolve(module_name)  # a nested class: pkg.mod.Outer.Inner
        if parent is None:
            return None
        target = parent
    found = getattr(target, attr, None)
    return found if isinstance(found, type) else None


def matches_class(exc: BaseException, name: str) -> bool:
    """True when ``exc`` is an instance of the class ``name`` (by import, or by MRO name)."""
    resolved = _resolve(name)
    if resolved is not None and isinstance(exc, resolved):
        return True
    return any(class_path(cls) == name for cls in type(exc).__mro__)


@dataclass(frozen=True)
class ExceptionClassifier:
    """
    Decides whether an exception may be retried, like Spring's ``DefaultErrorHandler`` classifier.

    :param not_retryable: classes never retried (added to the defaults unless those are disabled).
    :param retry_only: when not empty, only these classes are retried (Spring's ``retryOn``).
    :param traverse_causes: also look at the cause/context chain for ``not_retryable`` and ``retry_only``.
    :param always_traversed: those of ``not_retryable`` looked for along the whole cause chain
        whatever ``traverse_causes`` says, as Spring matches its default fatal exceptions
        (``ExceptionClassifier.ExtendedBinaryExceptionClassifier`` sets ``traverseCauses(true)``).
    """

    not_retryable: tuple[str, ...] = DEFAULT_NOT_RETRYABLE
    retry_only: tuple[str, ...] = ()
    traverse_causes: bool = True
    always_traversed: tuple[str, ...] = ()

    def first_match(
        self, exc: BaseException, names: Sequence[str], *, traverse: bool | None = None
    ) -> str | None:
        """
        The first name in ``names`` that ``exc`` (or a cause, if traversing) is an instance of.

        :param traverse: look along the cause chain; ``None``: as ``traverse_causes`` says.
        """
        for link in exception_chain(
            exc, traverse_causes=self.traverse_causes if traverse is None else traverse
        ):
            for name in names:
                if matches_class(link, name):
                    return name
        return None

    def is_fatal(self, exc: BaseException) -> bool:
        """True when ``exc`` is classified not retryable (fatal): it skips the retry tiers."""
        own = tuple(n for n in self.not_retryable if n not in self.always_traversed)
        traversed = tuple(n for n in self.not_retryable if n in self.always_traversed)
        return (
            self.first_match(exc, own) is not None
            or self.first_match(exc, traversed, traverse=True) is not None
        )

    def is_retryable(self, exc: BaseException) -> bool:
        """True when ``exc`` may go to a retry tier (attempts and timeout aside)."""
        if isinstance(exc, UnisolatedFailure):
            return True  # never classified by a neighbour's error or by retry_only
        if self.is_fatal(exc):
            return False
        if self.retry_only:
            return self.first_match(exc, self.retry_only) is not None
        return True
