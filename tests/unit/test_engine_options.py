"""Unit tests for airflow_kafka_retry.engine.drain.options (DrainOptions validation)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from airflow_kafka_retry.engine.drain.options import DEFAULT_TRANSACTIONAL_ID_PREFIX, DrainOptions

HANDLER = "myapp.handlers:handle"
NON_NEGATIVE = ["in_place_attempts", "in_place_backoff_ms", "max_extra_calls", "dead_letter_cap"]


def test_defaults() -> None:
    options = DrainOptions(HANDLER)
    assert options.handler == HANDLER
    assert options.value_deserializer is None
    assert options.key_deserializer is None
    assert options.batch_size == 100
    assert options.chunk_size == 5000
    assert options.max_records is None
    assert options.in_place_attempts == 0
    assert options.in_place_backoff_ms == 0
    assert options.max_extra_calls == 64
    assert options.transactional is True
    assert options.transactional_id_prefix == DEFAULT_TRANSACTIONAL_ID_PREFIX == "airflow-kafka-retry."
    assert options.consumer_group is None
    assert options.dead_letter_cap == 100
    assert options.idle_timeout_s == 60.0


def test_frozen() -> None:
    options = DrainOptions(HANDLER)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 5  # type: ignore[misc]


def test_to_dict_round_trips_and_is_json_serialisable() -> None:
    options = DrainOptions(
        HANDLER,
        value_deserializer="json:loads",
        batch_size=10,
        chunk_size=50,
        max_records=7,
        in_place_attempts=2,
        in_place_backoff_ms=100,
        max_extra_calls=0,
        transactional=False,
        transactional_id_prefix="p.",
        consumer_group="g",
        dead_letter_cap=0,
        idle_timeout_s=5,
    )
    data = options.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert DrainOptions(**data) == options
    assert set(data) == {f.name for f in dataclasses.fields(DrainOptions)}


@pytest.mark.parametrize("name", ["batch_size", "chunk_size"])
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 2.0, "10", None])
def test_positive_options(name: str, value: object) -> None:
    expected = f"option {name} must be an integer >= 1, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        DrainOptions(HANDLER, **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["batch_size", "chunk_size"])
def test_positive_options_accept_one(name: str) -> None:
    assert getattr(DrainOptions(HANDLER, **{name: 1}), name) == 1


@pytest.mark.parametrize("name", NON_NEGATIVE)
@pytest.mark.parametrize("value", [-1, -100, True, False, 0.5, "3", None])
def test_non_negative_options(name: str, value: object) -> None:
    expected = f"option {name} must be an integer >= 0, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        DrainOptions(HANDLER, **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NON_NEGATIVE)
def test_non_negative_options_accept_zero(name: str) -> None:
    assert getattr(DrainOptions(HANDLER, **{name: 0}), name) == 0


@pytest.mark.parametrize("value", [0, -1, 1.5, "5"])
def test_max_records(value: object) -> None:
    expected = f"option max_records must be an integer >= 1 or None, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        DrainOptions(HANDLER, max_records=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [None, 1, 10_000])
def test_max_records_accepts(value: int | None) -> None:
    assert DrainOptions(HANDLER, max_records=value).max_records == value


def test_max_records_rejects_booleans() -> None:
    with pytest.raises(ValueError, match="option max_records must be an integer >= 1 or None"):
        DrainOptions(HANDLER, max_records=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("handler", ["myapp.handlers.handle", "", None, 42])
def test_handler_must_be_a_module_function_path(handler: object) -> None:
    expected = f"option handler must be 'package.module:function', got {handler!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        DrainOptions(handler)  # type: ignore[arg-type]


def test_numbers_are_checked_before_the_handler() -> None:
    with pytest.raises(ValueError, match="option batch_size"):
        DrainOptions("no-colon", batch_size=0)


def test_deadline_is_off_by_default_and_travels_in_to_dict() -> None:
    assert DrainOptions(HANDLER).deadline_ms is None
    options = DrainOptions(HANDLER, deadline_ms=1_700_000_000_000)
    assert DrainOptions(**json.loads(json.dumps(options.to_dict()))).deadline_ms == 1_700_000_000_000


@pytest.mark.parametrize("value", [True, 1.5, "1700000000000"])
def test_deadline_must_be_epoch_milliseconds(value: object) -> None:
    with pytest.raises(ValueError, match=r"option deadline_ms must be epoch milliseconds .* got"):
        DrainOptions(HANDLER, deadline_ms=value)  # type: ignore[arg-type]
