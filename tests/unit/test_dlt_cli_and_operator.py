"""``dlt`` CLI bad input (exit code 2, before any Kafka client) and ``ReplayDltOperator`` options."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.replay import ReplayRequest, check_replay_id, new_replay_id
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator, as_flag, default_replay_id

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"
NOWHERE = "127.0.0.1:9"  # nothing listens: a test that reached Kafka would time out, not pass


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--offsets", "9-2"], "--offsets '9-2': offsets must be >= 0 and A <= B"),
        (["--since", "soon"], "--since 'soon' is not a time"),
        (["--dlt", "orders"], "--dlt 'orders' is not a dead-letter or parking topic"),
        (["--to", "orders-dlt"], "--to 'orders-dlt' is the topic being replayed"),
        (["--transform", "tests.support.dlt_transforms:nope"], "has no attribute 'nope'"),
        (["--replay-id", "has space"], "--replay-id 'has space'"),
        (["--chunk-size", "0"], "chunk_size must be an integer >= 1"),
    ],
)
def test_replay_bad_input_exits_2_naming_the_problem(capsys, args, message):
    code = main(["dlt", "replay", "--topology", str(EXAMPLE), "--bootstrap", NOWHERE, *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_inspect_bad_dlt_exits_2(capsys):
    assert (
        main(
            ["dlt", "inspect", "--topology", str(EXAMPLE), "--dlt", "orders-retry-1", "--bootstrap", NOWHERE]
        )
        == 2
    )
    assert "is not a dead-letter or parking topic" in capsys.readouterr().err


def test_replay_ids():
    assert new_replay_id(1_795_428_000_000).startswith("replay-20261123T100000Z-")
    assert new_replay_id() != new_replay_id()
    assert (
        check_replay_id("dag.manual__2026-11-23T10:00:00+00:00.task")
        == "dag.manual__2026-11-23T10:00:00+00:00.task"
    )


def test_request_spec_is_what_a_rerun_must_repeat():
    a = ReplayRequest(exception=["KeyError"], partition=1, limit=None, to="")
    b = ReplayRequest(exception=("KeyError",), partition="1")
    assert a.spec() == b.spec()
    assert a.spec()["to"] is None
    assert a.spec() != ReplayRequest(exception=["KeyError"], partition=2).spec()


def test_operator_template_fields_and_request_from_rendered_form_values():
    op = ReplayDltOperator(
        task_id="t",
        topology="t.yaml",
        dlt="None",
        exception="a.B,c.D",
        key=12,
        partition=[0, 1],
        limit=5,
        to="",
        transform=None,
        dry_run="True",
        offsets=3,
    )
    assert {
        "topology",
        "kafka_conn_id",
        "dlt",
        "exception",
        "original_topic",
        "since",
        "until",
        "key",
        "partition",
        "offsets",
        "limit",
        "to",
        "transform",
        "replay_dry_run",
        "replay_id",
    } <= set(op.template_fields)
    request = op.request()
    assert (request.dlt, request.to, request.key, request.limit) == (None, None, "12", 5)
    built = request.build_filter(0)
    assert built.exceptions == ("a.B", "c.D")
    assert built.keys == (b"12",)
    assert built.partitions == (0, 1)
    assert built.offsets == (3, 3)
    assert as_flag(op.replay_dry_run, "dry_run") is True
    assert as_flag(False, "x") is False
    with pytest.raises(ValueError, match="dry_run must be true or false"):
        as_flag("maybe", "dry_run")


def test_default_replay_id_is_stable_per_task_of_a_run():
    ti = SimpleNamespace(
        dag_id="replay", run_id="manual__2026-11-23T10:00:00+00:00", task_id="replay_dlt", map_index=-1
    )
    assert default_replay_id({"ti": ti}) == "replay.manual__2026-11-23T10:00:00+00:00.replay_dlt"
    mapped = SimpleNamespace(dag_id="d", run_id="r id", task_id="t", map_index=2)
    assert default_replay_id({"ti": mapped}) == "d.r_id.t.2"
    assert check_replay_id(default_replay_id({"ti": ti}))


def test_replay_dag_from_a_topology_object_with_own_dag_arguments():
    from airflow_kafka_retry import build_dlt_replay_dag
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(EXAMPLE)
    dag = build_dlt_replay_dag(
        topology,
        kafka_conn_id="kafka_prod",
        dag_id="replay_orders",
        tags=["ops"],
        params={"dry_run": True, "note": "extra form field"},
    )
    [task] = dag.tasks
    assert dag.dag_id == "replay_orders"
    assert set(dag.tags) == {"ops"}
    assert task.topology is topology
    assert task.kafka_conn_id == "kafka_prod"
    assert task.exception == "{{ params.exception }}"
    assert task.replay_dry_run == "{{ params.dry_run }}"
    params = dag.params.dump()
    assert params["note"] == "extra form field"
    assert params["limit"] is None
    assert params["dry_run"] is True
    assert dag.render_template_as_native_obj
    assert dag.max_active_runs == 1
