"""``build_retry_dags`` on a topology with ``input`` (another framework's DLQ as tier 0) and ``on_due``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.engine.drain.redelivery import no_handler
from airflow_kafka_retry.engine.kafka.loading import load_callable
from airflow_kafka_retry.factory.folder import TopologyFolderError, build_retry_dags_from_folder
from airflow_kafka_retry.factory.input_lane import REDELIVER_HANDLER
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.policy.errors import TopologyError

HANDLER = "handlers.orders:handle"
DLQ = "dlq.orders-share"
REPROCESS_TASKS = {"main", "retry_1", "retry_2"}


def _write(folder: Path, name: str, **fields) -> Path:
    data = {
        "topic": "orders",
        "group_id": "orders-retrier",
        "attempts": 3,
        "backoff": {"kind": "fixed", "delay": "5s"},
        **fields,
    }
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def _redeliver(folder: Path, name: str = "share.yaml", **fields) -> Path:
    return _write(folder, name, input={"family": "share-group", "dlq": DLQ}, on_due="redeliver", **fields)


def _lanes(dag) -> dict[str, dict]:
    [watcher] = dag.timetable.asset_condition.watchers
    return {lane["name"]: lane for lane in watcher.trigger.lanes}


def test_a_redelivering_topology_needs_no_handler_and_drains_its_dlq_unasked(tmp_path):
    dags = build_retry_dags(_redeliver(tmp_path))
    [dag] = dags.values()
    assert {t.task_id for t in dag.tasks} == {"ensure_topics", "watch_dlt", *REPROCESS_TASKS}
    for task_id in REPROCESS_TASKS:
        task = dag.get_task(task_id)
        assert task.handler == REDELIVER_HANDLER, task_id
    assert dag.get_task("main").tier == 0
    # the path the tasks get is the engine's own never-called handler
    assert load_callable(REDELIVER_HANDLER, what="handler") is no_handler
    lanes = _lanes(dag)
    # the main lane watches the DLQ, once the broker has created it (not a missing topic for the setup task)
    assert lanes["main"]["topics"] == [DLQ]
    assert lanes["main"]["optional_topics"] == [DLQ]
    assert "optional_topics" not in lanes["retry_1"]
    assert "dead-letter queue" in dag.doc_md


def test_a_handling_topology_with_an_input_gets_its_main_task_and_the_handler(tmp_path):
    path = _write(tmp_path, "connect.yaml", input={"family": "kafka-connect", "dlq": "connect-dlq"})
    [dag] = build_retry_dags(path, handler=HANDLER).values()
    assert {dag.get_task(t).handler for t in REPROCESS_TASKS} == {HANDLER}
    assert _lanes(dag)["main"]["topics"] == ["connect-dlq"]
    # a topology without an input: the main topic is the service's, drained only when asked
    [plain] = build_retry_dags(_write(tmp_path, "plain.yaml", topic="pay"), handler=HANDLER).values()
    assert "main" not in plain.task_ids
    assert (
        "optional_topics"
        not in _lanes(
            build_retry_dags(
                _write(tmp_path, "plain2.yaml", topic="pay2"), handler=HANDLER, include_main=True
            )["kafka_retry__pay2"]
        )["main"]
    )


def test_the_tier_layout_builds_a_dag_for_the_input_lane(tmp_path):
    dags = build_retry_dags(_redeliver(tmp_path), layout="tiers")
    assert f"kafka_retry__{DLQ}" in dags
    assert dags[f"kafka_retry__{DLQ}"].get_task("reprocess").handler == REDELIVER_HANDLER


@pytest.mark.parametrize(
    ("redeliver", "kwargs", "field", "words"),
    [
        (True, {"handler": HANDLER}, "on_due", "calls no handler"),
        (False, {}, "on_due", "needs handler="),
        (True, {"include_main": False}, "input", "include_main=False"),
    ],
)
def test_arguments_that_do_not_fit_the_topology_name_its_file_and_field(
    tmp_path, redeliver, kwargs, field, words
):
    path = _redeliver(tmp_path) if redeliver else _write(tmp_path, "plain.yaml")
    with pytest.raises(TopologyError) as caught:
        build_retry_dags(path, **kwargs)
    message = str(caught.value)
    assert str(path) in message
    assert f"field '{field}'" in message
    assert words in message


def test_a_folder_gives_its_handler_only_to_the_topologies_that_handle(tmp_path, caplog):
    _redeliver(tmp_path, "a-share.yaml")
    plain = _write(tmp_path, "b-pay.yaml", topic="pay", group_id="pay-svc")
    dags = build_retry_dags_from_folder(tmp_path, handler=HANDLER)
    assert dags["kafka_retry__orders"].get_task("retry_1").handler == REDELIVER_HANDLER
    assert dags["kafka_retry__pay"].get_task("retry_1").handler == HANDLER
    # without a handler, the redelivering topology is built and the other is skipped, naming its file
    with caplog.at_level(logging.ERROR, logger="airflow_kafka_retry.factory.folder"):
        dags = build_retry_dags_from_folder(tmp_path)
    assert list(dags) == ["kafka_retry__orders"]
    assert any(str(plain) in r.getMessage() and "needs handler=" in r.getMessage() for r in caplog.records)
    with pytest.raises(TopologyFolderError, match="b-pay.yaml"):
        build_retry_dags_from_folder(tmp_path, strict=True)


def test_a_redelivering_topology_dag_serializes(tmp_path):
    from airflow.serialization.serialized_objects import DagSerialization

    [dag] = build_retry_dags(_redeliver(tmp_path)).values()
    back = DagSerialization.from_dict(json.loads(json.dumps(DagSerialization.to_dict(dag))))
    assert sorted(back.task_ids) == sorted(dag.task_ids)
    assert back.get_task("retry_1").handler == REDELIVER_HANDLER
