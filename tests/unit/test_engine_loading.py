"""Unit tests for airflow_kafka_retry.engine.kafka.loading (imports only stdlib and temporary modules)."""

from __future__ import annotations

import json
import os.path
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.kafka.loading import UserCodeError, load_callable


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """``make(source)`` -> name of a fresh importable module holding ``source`` (removed afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def make(source: str) -> str:
        name = f"akr_test_user_code_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(source)
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_user_code_error_is_a_value_error() -> None:
    assert issubclass(UserCodeError, ValueError)


def test_loads_a_module_function() -> None:
    assert load_callable("json:dumps") is json.dumps


def test_loads_a_nested_attribute() -> None:
    assert load_callable("os:path.join") is os.path.join


def test_loads_a_dotted_module() -> None:
    assert load_callable("os.path:join") is os.path.join


def test_loads_user_handlers_and_nested_class_members(make_module: Callable[[str], str]) -> None:
    name = make_module(
        "def handle(records):\n"
        "    return len(records)\n"
        "class Handlers:\n"
        "    class Orders:\n"
        "        @staticmethod\n"
        "        def handle(records):\n"
        "            return 'orders'\n"
        "class Callable:\n"
        "    def __call__(self, records):\n"
        "        return 'instance'\n"
        "instance = Callable()\n"
    )
    handle = load_callable(f"{name}:handle")
    assert handle([1, 2]) == 2
    assert load_callable(f"{name}:Handlers.Orders.handle")([]) == "orders"
    assert load_callable(f"{name}:instance")([]) == "instance"  # any callable object
    assert isinstance(load_callable(f"{name}:Callable"), type)  # a class is callable too


@pytest.mark.parametrize("path", ["json.dumps", "json", "", "json dumps"])
def test_missing_colon(path: str) -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable(path)
    assert str(info.value) == f"handler {path!r} must be given as 'package.module:function'"


@pytest.mark.parametrize("path", [":dumps", "json:", ":"])
def test_empty_module_or_attribute(path: str) -> None:
    with pytest.raises(UserCodeError, match="must be given as 'package.module:function'"):
        load_callable(path)


@pytest.mark.parametrize("path", [None, 42, b"json:dumps"])
def test_not_a_string(path: object) -> None:
    with pytest.raises(UserCodeError, match="must be given as 'package.module:function'"):
        load_callable(path)  # type: ignore[arg-type]


def test_what_names_the_kind_of_user_code() -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable("json.loads", what="value_deserializer")
    assert str(info.value).startswith("value_deserializer 'json.loads' ")


def test_unknown_module_names_module_and_import_error() -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable("akr_no_such_module_xyz:handle")
    message = str(info.value)
    assert "handler 'akr_no_such_module_xyz:handle'" in message
    assert "cannot import module 'akr_no_such_module_xyz'" in message
    assert "ModuleNotFoundError" in message
    assert "No module named 'akr_no_such_module_xyz'" in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_unknown_submodule_of_a_known_package() -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable("json.akr_nope:handle", what="key_deserializer")
    message = str(info.value)
    assert message.startswith("key_deserializer 'json.akr_nope:handle': cannot import module 'json.akr_nope'")
    assert "ModuleNotFoundError" in message


def test_module_failing_at_import_is_reported(make_module: Callable[[str], str]) -> None:
    name = make_module("raise RuntimeError('boom at import')\n")
    with pytest.raises(UserCodeError) as info:
        load_callable(f"{name}:handle")
    message = str(info.value)
    assert f"cannot import module {name!r}" in message
    assert "RuntimeError: boom at import" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_module_with_syntax_error_is_reported(make_module: Callable[[str], str]) -> None:
    name = make_module("def handle(:\n")
    with pytest.raises(UserCodeError, match=f"cannot import module {name!r}: SyntaxError"):
        load_callable(f"{name}:handle")


def test_module_importing_a_missing_dependency_names_it(make_module: Callable[[str], str]) -> None:
    name = make_module("import akr_missing_dependency_abc\n")
    with pytest.raises(UserCodeError) as info:
        load_callable(f"{name}:handle")
    assert f"cannot import module {name!r}" in str(info.value)
    assert "akr_missing_dependency_abc" in str(info.value)


def test_missing_attribute() -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable("json:no_such_function")
    assert str(info.value) == (
        "handler 'json:no_such_function': module 'json' has no attribute 'no_such_function'"
    )


def test_missing_nested_attribute_names_the_whole_path() -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable("os:path.no_such_function")
    assert "module 'os' has no attribute 'path.no_such_function'" in str(info.value)


@pytest.mark.parametrize("path", ["os:path..join", "os:path.", "os:.path"])
def test_empty_attribute_segment(path: str) -> None:
    with pytest.raises(UserCodeError, match="has no attribute"):
        load_callable(path)


@pytest.mark.parametrize("path", ["math:pi", "os:sep", "json:decoder", "sys:path"])
def test_not_callable(path: str) -> None:
    with pytest.raises(UserCodeError) as info:
        load_callable(path)
    assert str(info.value) == f"handler {path!r} is not callable"


def test_not_callable_user_attribute(make_module: Callable[[str], str]) -> None:
    name = make_module("HANDLER = 'not a function'\n")
    with pytest.raises(UserCodeError, match="is not callable"):
        load_callable(f"{name}:HANDLER", what="value_deserializer")


def test_a_module_that_exits_as_it_is_imported_is_bad_input_not_an_exit() -> None:
    with pytest.raises(
        UserCodeError, match=r"cannot import module 'tests.support.exits_on_import': SystemExit: 3"
    ):
        load_callable("tests.support.exits_on_import:transform", what="transform")
