"""A topology run also runs the lanes whose event Airflow's scheduler left to no run (``stranded_lanes``).

Seen in a CI run and reproduced: the DLT watch fired at .23 s and ``main`` at .70 s; the scheduler made one
run from the first event and left the second to the asset's next event, 45 s later (``refire_after``).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import yaml

from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.operators.due_lanes import DueLanesOperator
from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_lanes import TOPOLOGY_DUE, stranded_lanes

URI = "kafka-retry-topology://kafka_default/orders"


def _events(*payloads: dict) -> dict:
    return {URI: [SimpleNamespace(extra={"payload": p}) for p in payloads]}


def _event(due: list[str], fired_ms: int | None, *, lanes: bool = True) -> dict:
    payload: dict = {"kind": TOPOLOGY_DUE, "due": due, "lanes": {}}
    if lanes:
        payload["lanes"] = {name: {"fired_ms": fired_ms} for name in due}
    if fired_ms is not None:
        payload["fired_ms"] = fired_ms
    return payload


def _wave(fired_ms: int) -> Wave:
    return Wave((("orders-retry-1", 0, 5),), fired_ms, fired_ms)


def test_a_lane_whose_wave_is_newer_than_every_event_of_the_run_is_stranded():
    events = _events(_event(["watch_dlt"], 1_000), _event(["retry_1"], 1_200))
    saved = {"retry_1": _wave(1_200), "retry_2": _wave(1_700), "main": _wave(900), "watch_dlt": None}
    assert stranded_lanes(events, saved) == {"retry_2"}
    # a wave fired with the newest event is that event's (not stranded)
    assert stranded_lanes(events, {"retry_2": _wave(1_200)}) == set()


def test_the_newest_event_time_comes_from_the_event_or_its_lanes():
    # an older payload without the event's own time: its lanes' times count
    assert stranded_lanes(_events(_event(["retry_1"], None)), {"retry_2": _wave(5)}) == set()
    older = {"kind": TOPOLOGY_DUE, "due": ["retry_1"], "lanes": {"retry_1": {"fired_ms": 10}}}
    assert stranded_lanes(_events(older), {"retry_2": _wave(11), "main": _wave(10)}) == {"retry_2"}
    # a setup event names no lane: its own time counts
    setup = _event(["ensure_topics"], 50, lanes=False)
    assert stranded_lanes(_events(setup), {"retry_1": _wave(60), "retry_2": _wave(40)}) == {"retry_1"}
    # no time anywhere (or not an int): nothing is called stranded
    assert stranded_lanes(_events({"kind": TOPOLOGY_DUE, "due": [], "lanes": {}}), {"r": _wave(1)}) == set()
    flag = _events({"kind": TOPOLOGY_DUE, "due": ["retry_1"], "lanes": {}, "fired_ms": True})
    assert stranded_lanes(flag, {"r": _wave(2)}) == set()
    assert stranded_lanes(None, {"r": _wave(1)}) == set()


class _Store:
    """``context["asset_state_store"]``: the accessors of the task's inlets, as the task runner makes them."""

    def __init__(self, state: dict, fail: Exception | None = None) -> None:
        self.state, self.fail, self.asked = state, fail, []

    def __getitem__(self, asset):
        self.asked.append((asset.name, asset.uri))
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(get=lambda key, default=None: self.state.get(key, default))


def _branch(**kwargs) -> DueLanesOperator:
    return DueLanesOperator(
        task_id="due", lanes=["retry_1", "retry_2", "watch_dlt"], setup_task="ensure_topics", **kwargs
    )


def test_the_branch_runs_the_stranded_lanes_too_read_from_the_watched_assets_state_store():
    branch = _branch(watched_asset=URI)
    assert [(type(a).__name__, a.name) for a in branch.inlets] == [("AssetNameRef", URI)]
    store = _Store({f"{STATE_KEY}:retry_2": _wave(2_000).to_state(), f"{STATE_KEY}:watch_dlt": "garbled"})
    context = {"triggering_asset_events": _events(_event(["retry_1"], 1_000)), "asset_state_store": store}
    with mock.patch.object(DueLanesOperator, "log", new_callable=mock.PropertyMock) as log:
        assert branch.choose_branch(context) == ["retry_1", "retry_2"]
    assert store.asked == [(URI, URI)]
    assert "retry_2" in log.return_value.info.call_args_list[0].args[1]
    # the stranded wave is the run's own event's: nothing added
    context["triggering_asset_events"] = _events(_event(["retry_1"], 1_000), _event(["retry_2"], 2_000))
    assert branch.choose_branch(context) == ["retry_1", "retry_2"]


def test_without_the_store_the_events_alone_decide_and_a_store_failure_is_a_warning():
    context = {
        "triggering_asset_events": _events(_event(["retry_1"], 1_000)),
        "asset_state_store": _Store({f"{STATE_KEY}:retry_2": _wave(2_000).to_state()}),
    }
    assert _branch().choose_branch(context) == ["retry_1"]  # no watched asset given
    failing = _Store({}, fail=KeyError("not in this task's inlets or outlets"))
    context["asset_state_store"] = failing
    branch = _branch(watched_asset=URI)
    with mock.patch.object(DueLanesOperator, "log", new_callable=mock.PropertyMock) as log:
        assert branch.choose_branch(context) == ["retry_1"]
    [warning] = log.return_value.warning.call_args_list
    assert URI in warning.args
    assert "KeyError" in warning.args
    # a sweep or a manual run reads no store: every lane, or the conf's
    assert branch.choose_branch({"triggering_asset_events": {}, "asset_state_store": failing}) == [
        "ensure_topics",
        "retry_1",
        "retry_2",
        "watch_dlt",
    ]


def test_the_topology_dags_first_task_reads_the_state_store_of_the_dags_own_asset(tmp_path: Path):
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({"topic": "orders", "group_id": "svc", "attempts": 3}))
    dag = build_retry_dags(str(path), handler="x:y")["kafka_retry__orders"]
    due = dag.get_task("due")
    assert due.watched_asset == dag.timetable.asset_condition.uri == URI
    # a reference, not a second Asset of that name (it would replace the DAG's asset and its watcher)
    assert [(type(a).__name__, a.name) for a in due.inlets] == [("AssetNameRef", URI)]
    assert dag.timetable.asset_condition.watchers
