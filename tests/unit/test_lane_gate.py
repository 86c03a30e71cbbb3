"""The topology DAG's lane gate: a lane task runs when its run names its lane, and skips itself otherwise."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from airflow.exceptions import AirflowSkipException

from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.operators.lane_gate import LaneGate
from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_lanes import TOPOLOGY_DUE

URI = "kafka-retry-topology://kafka_default/orders"
EVERY = {"ensure_topics", "retry_1", "retry_2", "watch_dlt"}


def _event(due: list[str], fired_ms: int | None = None) -> dict:
    payload: dict = {
        "kind": TOPOLOGY_DUE,
        "due": due,
        "lanes": {name: {"fired_ms": fired_ms} for name in due},
    }
    if fired_ms is not None:
        payload["fired_ms"] = fired_ms
    return payload


def _events(*payloads: dict) -> dict:
    return {URI: [SimpleNamespace(extra={"payload": p}) for p in payloads]}


def _gate(**kwargs) -> LaneGate:
    return LaneGate(
        lanes=["ensure_topics", "retry_1", "retry_2", "watch_dlt"], setup_task="ensure_topics", **kwargs
    )


class _Ti:
    """``context["ti"]``: its ids, and the run's task states as the execution API gives them."""

    def __init__(self, task_id: str, states: dict | None = None, fail: Exception | None = None) -> None:
        self.task_id, self.dag_id, self.run_id = task_id, "kafka_retry__orders", "asset_triggered__1"
        self.states, self.fail, self.asked = states or {}, fail, []

    def get_task_states(self, *, dag_id, task_ids, run_ids):
        self.asked.append((dag_id, sorted(task_ids), run_ids))
        if self.fail is not None:
            raise self.fail
        return {self.run_id: {t: s for t, s in self.states.items() if t in task_ids}}


def _context(*payloads: dict, task_id: str = "retry_1", **extra) -> dict:
    events = _events(*payloads) if payloads else {}
    return {"triggering_asset_events": events, "ti": _Ti(task_id), "task": mock.Mock(), **extra}


def test_a_run_names_the_due_lanes_of_every_queued_event():
    gate, log = _gate(), mock.Mock()
    assert gate.named(_context(_event(["retry_2"])), log) == {"retry_2"}
    assert gate.named(_context(_event(["retry_2"]), _event(["watch_dlt"])), log) == {"retry_2", "watch_dlt"}
    assert gate.named(_context(_event(["ensure_topics"])), log) == {"ensure_topics"}


def test_a_run_no_event_started_runs_every_lane_and_the_setup():
    gate, log = _gate(), mock.Mock()
    assert gate.named({"triggering_asset_events": {}}, log) == EVERY
    foreign = {"kind": "tier_due", "not_before_ms": 1}
    assert gate.named(_context(foreign), log) == EVERY


def test_a_manual_run_whose_conf_names_lanes_runs_only_those():
    gate, log = _gate(), mock.Mock()
    conf = {"triggering_asset_events": {}, "dag_run": SimpleNamespace(conf={"lanes": ["retry_2"]})}
    assert gate.named(conf, log) == {"retry_2"}
    for wrong in (["retry_7"], [], "retry_2"):
        with pytest.raises(ValueError, match="conf 'lanes' must"):
            gate.named({"dag_run": SimpleNamespace(conf={"lanes": wrong})}, log)


def test_an_event_for_a_tier_the_dag_no_longer_has_is_logged_and_ignored():
    gate, log = _gate(), mock.Mock()
    assert gate.named(_context(_event(["retry_3", "retry_1"])), log) == {"retry_1"}
    [warning] = log.warning.call_args_list
    assert "ignored" in warning.args[0]
    assert warning.args[1] == "retry_3"
    assert gate.named(_context(_event(["retry_9"])), log) == set()


def test_a_lane_the_run_does_not_name_skips_itself_before_anything_else():
    gate = _gate()
    context = _context(_event(["retry_2"]), task_id="retry_1")
    with mock.patch("airflow_kafka_retry.operators.lane_gate._skip") as skip:
        with pytest.raises(AirflowSkipException, match="names retry_2, not retry_1"):
            gate(context)
    skip.assert_not_called()  # its siblings were not waiting (their states: none known)
    with pytest.raises(AirflowSkipException, match="names no lane, not retry_1"):
        gate(_context(_event(["retry_9"]), task_id="retry_1"))


def test_a_named_lane_runs_and_then_calls_the_dags_own_hook():
    then = mock.Mock()
    gate = _gate(then=then)
    context = _context(_event(["retry_1"]), task_id="retry_1")
    with mock.patch("airflow_kafka_retry.operators.lane_gate._skip"):
        gate(context)
    then.assert_called_once_with(context)


def test_the_first_lane_to_start_skips_the_runs_unnamed_lanes_still_waiting():
    """A copy of a lane waiting for its lane in another run is skipped; started or finished ones are not."""
    states = {"ensure_topics": "success", "retry_2": "scheduled", "watch_dlt": "queued", "retry_1": "running"}
    ti = _Ti("retry_1", states)
    context = {**_context(_event(["retry_1"])), "ti": ti}
    with mock.patch("airflow_kafka_retry.operators.lane_gate._skip") as skip:
        _gate()(context)
    skip.assert_called_once_with(["retry_2"])
    assert ti.asked == [
        ("kafka_retry__orders", ["ensure_topics", "retry_2", "watch_dlt"], ["asset_triggered__1"])
    ]
    # a lane never skips the named ones, nor itself through the API (it raises instead)
    ti = _Ti("watch_dlt", {"retry_1": None, "retry_2": "scheduled", "ensure_topics": None})
    context = {**_context(_event(["retry_1"])), "ti": ti}
    with mock.patch("airflow_kafka_retry.operators.lane_gate._skip") as skip:
        with pytest.raises(AirflowSkipException):
            _gate()(context)
    skip.assert_called_once_with(["ensure_topics", "retry_2"])


def test_a_failure_to_skip_the_siblings_is_a_warning_and_the_lane_still_decides_for_itself():
    ti = _Ti("retry_1", fail=RuntimeError("api-server unreachable"))
    context = {**_context(_event(["retry_1"])), "ti": ti}
    _gate()(context)  # named: runs
    [warning] = context["task"].log.warning.call_args_list
    assert "RuntimeError" in warning.args


class _Store:
    """``context["asset_state_store"]``: the accessors of the task's inlets, as the task runner makes them."""

    def __init__(self, state: dict, fail: Exception | None = None) -> None:
        self.state, self.fail, self.asked = state, fail, []

    def __getitem__(self, asset):
        self.asked.append((asset.name, asset.uri))
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(get=lambda key, default=None: self.state.get(key, default))


def _wave(fired_ms: int) -> Wave:
    return Wave((("orders-retry-1", 0, 5),), fired_ms, fired_ms)


def test_a_run_also_names_the_stranded_lanes_read_from_the_watched_assets_state_store():
    gate, log = _gate(watched_asset=URI), mock.Mock()
    store = _Store({f"{STATE_KEY}:retry_2": _wave(2_000).to_state(), f"{STATE_KEY}:watch_dlt": "garbled"})
    context = {"triggering_asset_events": _events(_event(["retry_1"], 1_000)), "asset_state_store": store}
    assert gate.named(context, log) == {"retry_1", "retry_2"}
    assert store.asked == [(URI, URI)]
    assert "retry_2" in log.info.call_args_list[0].args[1]
    # the stranded wave is the run's own event's: nothing added
    context["triggering_asset_events"] = _events(_event(["retry_1"], 1_000), _event(["retry_2"], 2_000))
    assert gate.named(context, log) == {"retry_1", "retry_2"}


def test_without_the_store_the_events_alone_decide_and_a_store_failure_is_a_warning():
    context = {
        "triggering_asset_events": _events(_event(["retry_1"], 1_000)),
        "asset_state_store": _Store({f"{STATE_KEY}:retry_2": _wave(2_000).to_state()}),
    }
    assert _gate().named(context, mock.Mock()) == {"retry_1"}  # no watched asset given
    failing = _Store({}, fail=KeyError("not in this task's inlets or outlets"))
    context["asset_state_store"] = failing
    gate, log = _gate(watched_asset=URI), mock.Mock()
    assert gate.named(context, log) == {"retry_1"}
    [warning] = log.warning.call_args_list
    assert URI in warning.args
    assert "KeyError" in warning.args
    # a sweep or a manual run reads no store: every lane, or the conf's
    assert gate.named({"triggering_asset_events": {}, "asset_state_store": failing}, log) == EVERY


def test_every_task_of_a_topology_dag_is_a_gated_root_reading_the_dags_own_asset(tmp_path: Path):
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({"topic": "orders", "group_id": "svc", "attempts": 3}))
    dag = build_retry_dags(str(path), handler="x:y")["kafka_retry__orders"]
    assert {t.task_id for t in dag.tasks} == {"ensure_topics", "retry_1", "retry_2", "watch_dlt"}
    for task in dag.tasks:
        assert task.upstream_task_ids == set()  # the event starts each at once: no task in between
        assert task.max_active_tis_per_dag == 1
        gate = task._pre_execute_hook
        assert isinstance(gate, LaneGate)
        assert gate.watched_asset == dag.timetable.asset_condition.uri == URI
        assert set(gate.tasks) == {t.task_id for t in dag.tasks}
        # a reference, not a second Asset of that name (it would replace the DAG's asset and its watcher)
        assert [(type(a).__name__, a.name) for a in task.inlets] == [("AssetNameRef", URI)]
    assert dag.timetable.asset_condition.watchers
