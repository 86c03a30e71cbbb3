"""Unit tests for airflow_kafka_retry.policy.classify (pure, no network, no Airflow)."""

from __future__ import annotations

import json
import socket

import pytest

from airflow_kafka_retry.errors import DeserializationError
from airflow_kafka_retry.policy.classify import (
    DEFAULT_NOT_RETRYABLE,
    ExceptionClassifier,
    class_path,
    exception_chain,
    is_dotted_name,
    matches_class,
)


# Classes "defined in the handler's package": their dotted names cannot be imported here, so they
# must be matched by the dotted names in the exception's MRO.
class InvalidOrder(ValueError):
    pass


class MissingCustomer(InvalidOrder):
    pass


class Transient(Exception):
    pass


class Outer:
    class Inner(Exception):
        pass


InvalidOrder.__module__ = "myapp.errors"
MissingCustomer.__module__ = "myapp.customers"  # a subclass living in another (unimportable) module
Transient.__module__ = "myapp.errors"
Outer.Inner.__module__ = "myapp.nested"


def json_error() -> json.JSONDecodeError:
    try:
        json.loads("{not json")
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("unreachable")


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer from inner`` and return what was raised."""
    try:
        raise outer from inner
    except BaseException as exc:
        return exc


def raised_during(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer`` while handling ``inner`` (implicit ``__context__``)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer
    except BaseException as exc:
        return exc


def raised_during_from_none(outer: BaseException, inner: BaseException) -> BaseException:
    """``raise outer from None`` while handling ``inner``: the context is suppressed."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer from None
    except BaseException as exc:
        return exc


# ---------------------------------------------------------------------- names
@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("ValueError", True),
        ("json.JSONDecodeError", True),
        ("myapp.errors.InvalidOrder", True),
        ("_private.Mod_1.Err", True),
        ("", False),
        ("my-app.Error", False),
        ("1up.Error", False),
        ("a..b", False),
        (".a", False),
        ("a.", False),
        ("a b", False),
        ("a.b()", False),
    ],
)
def test_is_dotted_name(name: str, ok: bool) -> None:
    assert is_dotted_name(name) is ok


@pytest.mark.parametrize(
    ("cls", "path"),
    [
        (ValueError, "ValueError"),
        (KeyError, "KeyError"),
        (json.JSONDecodeError, "json.decoder.JSONDecodeError"),  # where it really lives
        (InvalidOrder, "myapp.errors.InvalidOrder"),
        (Outer.Inner, "myapp.nested.Outer.Inner"),
        (DeserializationError, "airflow_kafka_retry.errors.DeserializationError"),
    ],
)
def test_class_path(cls: type, path: str) -> None:
    assert class_path(cls) == path


# ---------------------------------------------------------------------- matches_class
@pytest.mark.parametrize(
    ("exc", "name", "expected"),
    [
        # builtins by bare name, by subclass
        (ValueError("x"), "ValueError", True),
        (KeyError("k"), "LookupError", True),
        (KeyError("k"), "KeyError", True),
        (KeyError("k"), "ValueError", False),
        (FileNotFoundError(), "OSError", True),
        (ConnectionRefusedError(), "ConnectionError", True),
        (ModuleNotFoundError(), "ImportError", True),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), "ValueError", True),
        (ValueError("x"), "Exception", True),
        (ValueError("x"), "BaseException", True),
        (KeyboardInterrupt(), "Exception", False),
        (ValueError("x"), "builtins.ValueError", True),  # dotted spelling of a builtin resolves by import
        (TimeoutError(), "socket.timeout", True),  # an alias resolved by import
        # import-resolved: json.JSONDecodeError actually lives in json.decoder
        (json_error(), "json.JSONDecodeError", True),
        (json_error(), "json.decoder.JSONDecodeError", True),
        (json_error(), "ValueError", True),
        (ValueError("x"), "json.JSONDecodeError", False),
        # MRO names for classes that cannot be imported by that name
        (InvalidOrder("x"), "myapp.errors.InvalidOrder", True),
        (MissingCustomer("x"), "myapp.errors.InvalidOrder", True),  # subclass
        (MissingCustomer("x"), "myapp.customers.MissingCustomer", True),
        (MissingCustomer("x"), "ValueError", True),  # builtin base by bare name
        (InvalidOrder("x"), "myapp.customers.MissingCustomer", False),  # not the other way round
        (InvalidOrder("x"), "InvalidOrder", False),  # bare names are builtins only
        (InvalidOrder("x"), "myapp.InvalidOrder", False),
        (InvalidOrder("x"), "otherapp.errors.InvalidOrder", False),
        (Transient("x"), "myapp.errors.InvalidOrder", False),
        (Outer.Inner("x"), "myapp.nested.Outer.Inner", True),
        # names that resolve to nothing, or to something that is not a class
        (ValueError("x"), "NoSuchBuiltinError", False),
        (ValueError("x"), "len", False),
        (ValueError("x"), "json.loads", False),
        (ValueError("x"), "json.NoSuchError", False),
        (DeserializationError("bad bytes"), "airflow_kafka_retry.errors.DeserializationError", True),
    ],
)
def test_matches_class(exc: BaseException, name: str, expected: bool) -> None:
    assert matches_class(exc, name) is expected


class Importable:
    """An importable namespace whose attributes alias classes defined elsewhere."""

    Alias = KeyError


ModuleAlias = OSError


def test_dotted_name_resolved_by_import_not_by_spelling() -> None:
    # The names below are not the class paths of KeyError / OSError, so only import resolution can match them.
    assert matches_class(KeyError("k"), f"{__name__}.Importable.Alias")  # nested: pkg.mod.Outer.Inner
    assert matches_class(FileNotFoundError(), f"{__name__}.ModuleAlias")
    assert not matches_class(ValueError(), f"{__name__}.Importable.Alias")
    assert not matches_class(KeyError("k"), f"{__name__}.Importable.Missing")


def test_alias_resolved_by_import() -> None:
    assert socket.timeout is TimeoutError
    assert matches_class(TimeoutError(), "TimeoutError")
    assert matches_class(TimeoutError(), "socket.timeout")


# ---------------------------------------------------------------------- exception_chain
def test_chain_without_traversal_is_only_the_exception() -> None:
    exc = raised_from(RuntimeError("outer"), KeyError("inner"))
    assert list(exception_chain(exc, traverse_causes=False)) == [exc]


def test_chain_follows_cause() -> None:
    inner = KeyError("inner")
    exc = raised_from(RuntimeError("outer"), inner)
    assert list(exception_chain(exc, traverse_causes=True)) == [exc, inner]


def test_chain_follows_context() -> None:
    inner = KeyError("inner")
    exc = raised_during(RuntimeError("outer"), inner)
    assert exc.__context__ is inner
    assert list(exception_chain(exc, traverse_causes=True)) == [exc, inner]


def test_chain_respects_suppress_context() -> None:
    inner = KeyError("inner")
    exc = raised_during_from_none(RuntimeError("outer"), inner)
    assert exc.__context__ is inner
    assert exc.__suppress_context__
    assert list(exception_chain(exc, traverse_causes=True)) == [exc]


def test_chain_prefers_cause_over_context() -> None:
    context, cause = KeyError("context"), OSError("cause")
    try:
        try:
            raise context
        except KeyError:
            raise RuntimeError("outer") from cause
    except RuntimeError as caught:
        exc = caught
    assert exc.__context__ is context  # both are set; the explicit cause wins
    assert list(exception_chain(exc, traverse_causes=True)) == [exc, cause]


def test_chain_is_deep() -> None:
    a, b, c, d = ValueError("a"), KeyError("b"), OSError("c"), TypeError("d")
    a.__cause__ = b
    b.__context__ = c
    c.__cause__ = d
    assert list(exception_chain(a, traverse_causes=True)) == [a, b, c, d]


def test_chain_is_cycle_safe() -> None:
    a, b = ValueError("a"), KeyError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert list(exception_chain(a, traverse_causes=True)) == [a, b]
    self_loop = RuntimeError("self")
    self_loop.__context__ = self_loop
    assert list(exception_chain(self_loop, traverse_causes=True)) == [self_loop]


def test_chain_cycle_via_context() -> None:
    a, b, c = ValueError("a"), KeyError("b"), OSError("c")
    a.__context__ = b
    b.__context__ = c
    c.__context__ = b
    assert list(exception_chain(a, traverse_causes=True)) == [a, b, c]


# ---------------------------------------------------------------------- classifier
def test_default_not_retryable_list() -> None:
    assert DEFAULT_NOT_RETRYABLE == (
        "airflow_kafka_retry.errors.DeserializationError",
        "json.JSONDecodeError",
        "UnicodeDecodeError",
        "TypeError",
        "AttributeError",
        "NotImplementedError",
        "ImportError",
    )
    assert ExceptionClassifier().not_retryable == DEFAULT_NOT_RETRYABLE


@pytest.mark.parametrize(
    "exc",
    [
        DeserializationError("bad bytes"),
        json_error(),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        TypeError("x"),
        AttributeError("x"),
        NotImplementedError(),
        ImportError("x"),
        ModuleNotFoundError("x"),  # subclass of ImportError
    ],
)
def test_default_fatal_exceptions(exc: BaseException) -> None:
    classifier = ExceptionClassifier()
    assert classifier.is_fatal(exc)
    assert not classifier.is_retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("x"),
        KeyError("k"),
        ConnectionError(),
        TimeoutError(),
        RuntimeError(),
        OSError(),
        InvalidOrder(),
    ],
)
def test_other_exceptions_are_retryable_by_default(exc: BaseException) -> None:
    classifier = ExceptionClassifier()
    assert not classifier.is_fatal(exc)
    assert classifier.is_retryable(exc)


def test_default_fatal_list_off() -> None:
    classifier = ExceptionClassifier(not_retryable=())
    for exc in (TypeError("x"), json_error(), DeserializationError("x"), ImportError("x")):
        assert not classifier.is_fatal(exc)
        assert classifier.is_retryable(exc)


def test_user_not_retryable_by_subclass() -> None:
    classifier = ExceptionClassifier(not_retryable=(*DEFAULT_NOT_RETRYABLE, "myapp.errors.InvalidOrder"))
    assert classifier.is_fatal(InvalidOrder())
    assert classifier.is_fatal(MissingCustomer())
    assert classifier.is_retryable(Transient())
    assert classifier.is_retryable(ValueError())  # the base class is not fatal


def test_fatal_through_cause() -> None:
    classifier = ExceptionClassifier()
    wrapped = raised_from(RuntimeError("handler failed"), json_error())
    assert classifier.is_fatal(wrapped)
    assert not classifier.is_retryable(wrapped)


def test_fatal_through_context() -> None:
    classifier = ExceptionClassifier(not_retryable=("myapp.errors.InvalidOrder",))
    assert classifier.is_fatal(raised_during(RuntimeError("while handling"), MissingCustomer()))


def test_suppressed_context_is_not_looked_at() -> None:
    classifier = ExceptionClassifier(not_retryable=("myapp.errors.InvalidOrder",))
    exc = raised_during_from_none(RuntimeError("clean"), InvalidOrder())
    assert not classifier.is_fatal(exc)
    assert classifier.is_retryable(exc)


def test_fatal_deep_in_chain() -> None:
    classifier = ExceptionClassifier(not_retryable=("KeyError",))
    a, b, c = RuntimeError("a"), OSError("b"), KeyError("c")
    a.__cause__ = b
    b.__context__ = c
    assert classifier.is_fatal(a)


def test_cyclic_chain_does_not_hang() -> None:
    classifier = ExceptionClassifier(not_retryable=("KeyError",))
    a, b = RuntimeError("a"), OSError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert not classifier.is_fatal(a)
    assert classifier.is_retryable(a)


def test_traverse_causes_false_only_looks_at_the_exception() -> None:
    classifier = ExceptionClassifier(traverse_causes=False)
    wrapped = raised_from(RuntimeError("handler failed"), json_error())
    assert not classifier.is_fatal(wrapped)
    assert classifier.is_retryable(wrapped)
    assert classifier.is_fatal(json_error())
    assert not classifier.is_fatal(raised_during(RuntimeError("x"), TypeError("y")))


def test_retry_only() -> None:
    classifier = ExceptionClassifier(
        not_retryable=(), retry_only=("ConnectionError", "myapp.errors.Transient")
    )
    assert classifier.is_retryable(ConnectionRefusedError())  # subclass
    assert classifier.is_retryable(Transient())
    assert not classifier.is_retryable(ValueError())
    assert not classifier.is_retryable(RuntimeError())
    # not in retry_only means "not retried", but it is not "fatal" in the not_retryable sense
    assert not classifier.is_fatal(ValueError())


def test_retry_only_through_cause() -> None:
    wrapped = raised_from(RuntimeError("wrapper"), ConnectionResetError())
    assert ExceptionClassifier(retry_only=("ConnectionError",)).is_retryable(wrapped)
    shallow = ExceptionClassifier(retry_only=("ConnectionError",), traverse_causes=False)
    assert not shallow.is_retryable(wrapped)


def test_fatal_wins_over_retry_only() -> None:
    # the default fatal list still applies with retry_only (as Spring's fatal defaults do with retryOn)
    classifier = ExceptionClassifier(retry_only=("Exception",))
    assert classifier.is_retryable(ValueError())
    assert not classifier.is_retryable(TypeError())
    assert not classifier.is_retryable(raised_from(ConnectionError(), json_error()))


def test_first_match_order() -> None:
    classifier = ExceptionClassifier()
    exc = raised_from(KeyError("outer"), InvalidOrder("inner"))
    # the chain is walked outermost first; within a link the names are tried in order
    assert classifier.first_match(exc, ["myapp.errors.InvalidOrder", "LookupError"]) == "LookupError"
    assert classifier.first_match(exc, ["LookupError", "KeyError"]) == "LookupError"
    assert classifier.first_match(exc, ["myapp.errors.InvalidOrder"]) == "myapp.errors.InvalidOrder"
    assert classifier.first_match(exc, ["OSError"]) is None
    assert classifier.first_match(exc, []) is None
    assert ExceptionClassifier(traverse_causes=False).first_match(exc, ["myapp.errors.InvalidOrder"]) is None


def test_classifier_is_frozen() -> None:
    with pytest.raises(AttributeError):
        ExceptionClassifier().traverse_causes = False  # type: ignore[misc]
