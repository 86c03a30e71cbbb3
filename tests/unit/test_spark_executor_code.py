"""The user's code imported on a Spark executor: a missing module is named, with how to ship it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.spark.executor_code import ExecutorImportError, import_user_code


@pytest.fixture
def handler_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package whose handler module imports a library that is not installed (as on a bare executor)."""
    package = tmp_path / "exec_orders_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handler.py").write_text("import exec_pricing_lib.rates\n\ndef handle(records):\n    pass\n")
    (package / "plain.py").write_text("def handle(records):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "exec_orders_pkg"
    for name in [n for n in sys.modules if n.startswith("exec_orders_pkg")]:
        del sys.modules[name]


def test_a_module_missing_on_the_executor_is_named_with_how_to_ship_it(handler_package: str) -> None:
    options = DrainOptions(handler=f"{handler_package}.handler:handle")
    with pytest.raises(ExecutorImportError) as caught:
        import_user_code(options)
    message = str(caught.value)
    assert "no module named 'exec_pricing_lib'" in message
    assert "ship 'exec_pricing_lib' as well" in message
    assert f"Spark executor on {socket.gethostname()}" in message
    assert sys.executable in message
    # what the submission did ship, so the user sees the gap
    assert "ships airflow_kafka_retry, exec_orders_pkg in --py-files" in message
    assert "py_files=" in message
    assert "wheel" in message


def test_the_driver_reports_the_plain_import_error(handler_package: str) -> None:
    options = DrainOptions(handler=f"{handler_package}.handler:handle")
    with pytest.raises(UserCodeError) as caught:
        import_user_code(options, on_executor=False)
    assert not isinstance(caught.value, ExecutorImportError)
    assert "cannot import module 'exec_orders_pkg.handler'" in str(caught.value)


def test_other_load_failures_are_not_taken_for_a_missing_module(handler_package: str) -> None:
    with pytest.raises(UserCodeError) as caught:
        import_user_code(DrainOptions(handler=f"{handler_package}.plain:nothing_here"))
    assert not isinstance(caught.value, ExecutorImportError)
    assert "has no attribute 'nothing_here'" in str(caught.value)
    import_user_code(DrainOptions(handler=f"{handler_package}.plain:handle"))  # loads


def test_a_missing_deserializer_module_is_named_too(handler_package: str) -> None:
    options = DrainOptions(
        handler=f"{handler_package}.plain:handle", value_deserializer="exec_missing_codec:decode"
    )
    with pytest.raises(ExecutorImportError, match="value_deserializer 'exec_missing_codec:decode'"):
        import_user_code(options)
