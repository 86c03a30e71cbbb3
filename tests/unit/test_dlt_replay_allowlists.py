"""What a replay may run and where it may write: the DAG author's transforms and targets, nothing else.

A replay checks both before it creates a Kafka client (``NOWHERE``: a test that reached Kafka would
time out, not pass) and imports nothing for a transform that is not on its list.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_targets import check_target_spec, target_for
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.topology.file import load_topology

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"
NOWHERE = {"bootstrap.servers": "127.0.0.1:9"}
MARKER_MODULE = "tests.support.import_marker"
FIX = "tests.support.dlt_transforms:fix"


@pytest.fixture
def topology():
    return load_topology(EXAMPLE)


@pytest.fixture
def no_marker_module():
    sys.modules.pop(MARKER_MODULE, None)
    yield
    assert MARKER_MODULE not in sys.modules, f"{MARKER_MODULE} was imported"


@pytest.mark.parametrize(
    "given", [f"{MARKER_MODULE}:transform", "fix_currency", "tests.support.exits_on_import:x"]
)
def test_a_transform_not_on_the_list_fails_before_anything_is_imported(topology, no_marker_module, given):
    with pytest.raises(
        ReplayError, match=rf"transform '{given}' is not one of this replay's transforms \(fix\)"
    ):
        Replay(topology, NOWHERE, ReplayRequest(transform=given), transforms={"fix": FIX}, dry_run=True)


def test_an_empty_list_allows_no_transform(topology, no_marker_module):
    with pytest.raises(ReplayError, match=r"not one of this replay's transforms \(none\)"):
        Replay(topology, NOWHERE, ReplayRequest(transform=f"{MARKER_MODULE}:transform"), transforms={})


def test_a_transform_on_the_list_is_loaded_by_its_name(topology):
    replay = Replay(topology, NOWHERE, ReplayRequest(transform="fix"), transforms={"fix": FIX}, dry_run=True)
    assert replay.transform.__name__ == "fix"
    assert replay.request.transform == "fix"


def test_the_command_line_still_takes_a_path(topology):
    assert Replay(topology, NOWHERE, ReplayRequest(transform=FIX)).transform.__name__ == "fix"


@pytest.mark.parametrize("to", ["payments", "orders-parking", "orders-dlt-archive"])
def test_to_names_only_the_topologys_own_topics_by_default(topology, to):
    with pytest.raises(ReplayError, match=rf"--to '{to}' is not a topic of .*main and retry tiers: orders, "):
        Replay(topology, NOWHERE, ReplayRequest(to=to))


def test_allowed_targets_open_more_topics(topology):
    check_target_spec(topology, topology.dlt_topic, "payments-fixups", {"payments-fixups"})
    for to in ("main", "first-tier", topology.tier(2).topic):
        check_target_spec(topology, topology.dlt_topic, to)
    with pytest.raises(ReplayError, match="is a dead-letter topic"):  # a DLT stays refused even when listed
        check_target_spec(topology, topology.parking_topic, topology.dlt_topic, {topology.dlt_topic})


def _record(original_topic: str) -> DltRecord:
    return DltRecord(
        topic="orders-dlt",
        partition=0,
        offset=7,
        timestamp_ms=0,
        key=b"k",
        value=b"v",
        headers=(("kafka_original-topic", original_topic.encode()),),
    )


def test_a_producer_chosen_original_topic_is_not_a_default_target(topology):
    # Spring keeps an original-topic header the producer set (see policy/headers/codec.py): the replay refuses
    # it
    with pytest.raises(
        ReplayError, match=r"the original topic of orders-dlt\[0\]@7 'payments' is not a topic of"
    ):
        target_for(topology, topology.dlt_topic, None, _record("payments"))
    assert (
        target_for(topology, topology.dlt_topic, None, _record("payments"), allowed={"payments"}).topic
        == "payments"
    )
    assert target_for(topology, topology.dlt_topic, None, _record("orders")).topic == "orders"


def test_the_cli_refuses_a_foreign_target_unless_allowed(capsys):
    args = ["dlt", "replay", "--topology", str(EXAMPLE), "--bootstrap", NOWHERE["bootstrap.servers"]]
    assert main([*args, "--to", "payments"]) == 2
    assert "--to 'payments' is not a topic of" in capsys.readouterr().err
    assert main([*args, "--to", "payments", "--allow-target", "payments", "--replay-id", "bad id"]) == 2
    assert "--replay-id 'bad id'" in capsys.readouterr().err  # got past the target check


def test_the_dag_offers_the_allowlists(topology):
    from airflow_kafka_retry import build_dlt_replay_dag

    dag = build_dlt_replay_dag(
        topology, dag_id="replay_orders", transforms={"fix": FIX}, allowed_targets=["payments-fixups"]
    )
    [task] = dag.tasks
    assert task.transforms == {"fix": FIX}
    assert task.allowed_targets == ["payments-fixups"]
    assert "transforms" not in task.template_fields
    assert "allowed_targets" not in task.template_fields
    schema = dag.params.get_param("transform").schema
    assert schema["enum"] == [None, "fix"]
    assert "payments-fixups" in dag.params.get_param("to").schema["examples"]
    with pytest.raises(Exception, match="transform"):
        dag.params.get_param("transform").resolve(f"{MARKER_MODULE}:transform")


@pytest.mark.parametrize(
    ("transforms", "message"),
    [
        ({"fix": "no_colon"}, "transforms['fix'] = 'no_colon' must be given as 'package.module:function'"),
        ({"a:b": FIX}, "transforms: 'a:b' is not a transform name"),
    ],
)
def test_bad_allowlists_fail_when_the_dag_is_built(topology, transforms, message):
    from airflow_kafka_retry import build_dlt_replay_dag

    with pytest.raises(UserCodeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_dlt_replay_dag(topology, transforms=transforms)
