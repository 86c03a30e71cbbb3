"""What ``build_retry_dags`` builds: DAG ids, schedules, task graphs and operator arguments per topology."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.factory.dag_builders import CUTOFF_RENDERED_NOW
from airflow_kafka_retry.factory.overrides import TierOverrideError
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

REPO = Path(__file__).parents[2]
ORDERS = REPO / "dags" / "topologies" / "orders.yaml"
HANDLER = "handlers.orders:handle"


def _write(tmp_path: Path, name: str = "t.yaml", **fields) -> Path:
    data = {"topic": "pay", "group_id": "pay-svc", **fields}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _chain(dag) -> list[tuple[str, list[str]]]:
    return [(t.task_id, sorted(t.downstream_task_ids)) for t in sorted(dag.tasks, key=lambda t: t.task_id)]


SCHEDULE = {"trigger": "schedule"}
TIERS = {"layout": "tiers"}  # event mode, a DAG per tier (test_factory_topology_dag.py: the default layout)
TIER_CHAIN = [("ensure_topics", ["wait_for_due"]), ("reprocess", []), ("wait_for_due", ["reprocess"])]


def test_default_topology_one_dag_per_retry_tier_and_a_dlt_watch():
    dags = build_retry_dags(ORDERS, **SCHEDULE, handler=HANDLER, value_deserializer="handlers.orders:decode")
    assert list(dags) == [
        "kafka_retry__orders-retry-1",
        "kafka_retry__orders-retry-2",
        "kafka_retry__orders-retry-3",
        "kafka_retry__orders-dlt",
    ]
    schedules = {dag_id: dag.schedule for dag_id, dag in dags.items()}
    # exponential 30s x2, max 10m, 4 attempts: 30s, 60s, 120s; the watch runs as often as the fastest tier
    assert schedules == {
        "kafka_retry__orders-retry-1": timedelta(seconds=30),
        "kafka_retry__orders-retry-2": timedelta(seconds=60),
        "kafka_retry__orders-retry-3": timedelta(seconds=120),
        "kafka_retry__orders-dlt": timedelta(seconds=30),
    }
    for index, dag_id in enumerate(list(dags)[:3], start=1):
        dag = dags[dag_id]
        assert dag.dag_id == dag_id
        assert dag.max_active_runs == 1
        assert dag.catchup is False
        assert "kafka-retry" in dag.tags
        assert _chain(dag) == TIER_CHAIN
        ensure, wait, reprocess = (dag.get_task(t) for t in ("ensure_topics", "wait_for_due", "reprocess"))
        assert (ensure.topology, ensure.kafka_conn_id) == (str(ORDERS), "kafka_default")
        assert (wait.topology, wait.tier, wait.kafka_conn_id, wait.deferrable) == (
            str(ORDERS),
            index,
            "kafka_default",
            True,
        )
        assert wait.max_wait == dag.schedule
        assert wait.window is None
        assert type(reprocess).__name__ == "ReprocessTierOperator"
        assert (
            reprocess.topology,
            reprocess.tier,
            reprocess.handler,
            reprocess.value_deserializer,
            reprocess.kafka_conn_id,
        ) == (str(ORDERS), index, HANDLER, "handlers.orders:decode", "kafka_default")
        assert reprocess.cutoff == CUTOFF_RENDERED_NOW
        assert reprocess.max_run is None
        assert reprocess.window is None
        assert reprocess.outlets == []  # no asset_server: no asset outlets
    watch = dags["kafka_retry__orders-dlt"]
    assert [t.task_id for t in watch.tasks] == ["watch_dlt"]
    [task] = watch.tasks
    assert type(task).__name__ == "DltWatchOperator"
    assert task.topology == str(ORDERS)


def test_tier_layout_tiers_run_on_their_due_asset_or_a_weekly_sweep():
    dags = build_retry_dags(
        ORDERS,
        **TIERS,
        handler=HANDLER,
        tier_overrides={
            "orders-retry-3": {"schedule": "0 1 * * *", "window": "01:00-05:00", "timezone": "Europe/Berlin"}
        },
    )
    assert list(dags) == [
        "kafka_retry__orders-retry-1",
        "kafka_retry__orders-retry-2",
        "kafka_retry__orders-retry-3",
        "kafka_retry__orders-dlt",
        "kafka_retry__orders__ensure_topics",
    ]
    topology = load_topology(ORDERS)
    for index, dag_id in enumerate(list(dags)[:3], start=1):
        dag = dags[dag_id]
        assert type(dag.timetable).__name__ == "AssetOrTimeSchedule"
        assert dag.max_active_runs == 1
        asset = dag.timetable.asset_condition
        tier = topology.tier(index)
        assert asset.uri == f"kafka-retry-due://kafka_default/{tier.topic}"
        [watcher] = asset.watchers
        trigger = watcher.trigger
        assert type(trigger).__name__ == "TierDueEventTrigger"
        assert (trigger.topic, trigger.consumer_group, trigger.kafka_conn_id) == (
            tier.topic,
            topology.consumer_group(tier),
            "kafka_default",
        )
        assert (trigger.fire_ahead, trigger.refire_after) == (3.0, 45.0)
        assert trigger.due_horizon_ms == 86_400_000 + tier.delay_ms
        assert (trigger.topology_topic, trigger.tier_index) == (
            "orders",
            index,
        )  # it sends the backlog gauges
        # no sensor, no ensure_topics per run: the one task waits for its wave and drains from "now"
        assert [t.task_id for t in dag.tasks] == ["reprocess"]
        assert dag.get_task("reprocess").cutoff == "now"
        assert dag.get_task("reprocess").skip_missing_topic
        assert dag.get_task("reprocess").follow_ms == 10_000
    # the default sweep: weekly, each DAG of the topology on its own day (slot: tiers in order, then the DLT
    # watch), at a time of day derived from the DAG id; the factory sets no start date
    first_day = zlib.crc32(b"orders")
    for slot, dag_id in (
        (0, "kafka_retry__orders-retry-1"),
        (1, "kafka_retry__orders-retry-2"),
        (3, "kafka_retry__orders-dlt"),
    ):
        sweep = dags[dag_id].timetable.timetable
        assert type(sweep).__name__ == "CronTriggerTimetable"
        spread = zlib.crc32(dag_id.encode())
        assert sweep.expression == f"{spread % 60} {spread // 60 % 24} * * {(first_day + slot) % 7}", (
            sweep.expression
        )
        assert dags[dag_id].start_date is None
    night = dags["kafka_retry__orders-retry-3"]
    assert night.timetable.timetable.expression == "0 1 * * *"
    assert (
        night.timetable.asset_condition.watchers[0].trigger.window,
        night.get_task("reprocess").window,
    ) == ("01:00-05:00", "01:00-05:00")
    # the DLT watch runs when a dead letter arrives in any of the topology's DLTs or its parking topic
    watch = dags["kafka_retry__orders-dlt"]
    [trigger] = [w.trigger for w in watch.timetable.asset_condition.watchers]
    assert type(trigger).__name__ == "DltArrivalEventTrigger"
    assert trigger.topics == [*(t.topic for t in topology.dlt_tiers), topology.parking_topic]
    assert trigger.optional_topics == [topology.parking_topic]  # watched once it exists
    assert trigger.consumer_group == "orders-service-dlt-watch"
    assert [t.task_id for t in watch.tasks] == ["watch_dlt"]
    # the topics are created once
    setup = dags["kafka_retry__orders__ensure_topics"]
    assert type(setup.timetable).__name__ == "OnceTimetable"
    assert [t.task_id for t in setup.tasks] == ["ensure_topics"]
    assert (setup.tasks[0].retries, setup.tasks[0].retry_delay) == (3, timedelta(seconds=20))  # it runs once


def test_event_mode_settings_are_checked():
    sweep = build_retry_dags(
        ORDERS,
        **TIERS,
        handler=HANDLER,
        sweep=timedelta(minutes=10),
        fire_ahead=timedelta(0),
        refire_after=timedelta(minutes=5),
        dlt_watch=False,
    )
    tier = sweep["kafka_retry__orders-retry-1"]
    assert tier.timetable.timetable.delta == timedelta(minutes=10)
    assert (
        tier.timetable.asset_condition.watchers[0].trigger.fire_ahead,
        tier.timetable.asset_condition.watchers[0].trigger.refire_after,
    ) == (0.0, 300.0)
    with pytest.raises(ValueError, match="trigger must be one of event, schedule, got 'kafka'"):
        build_retry_dags(ORDERS, handler=HANDLER, trigger="kafka")
    with pytest.raises(ValueError, match="fire_ahead must be a timedelta from 0 to 30s"):
        build_retry_dags(ORDERS, handler=HANDLER, fire_ahead=timedelta(minutes=5))
    assert (
        build_retry_dags(ORDERS, **TIERS, handler=HANDLER, follow=None)["kafka_retry__orders-retry-1"]
        .get_task("reprocess")
        .follow_ms
        is None
    )
    with pytest.raises(ValueError, match="follow must be a timedelta >= 0 or None"):
        build_retry_dags(ORDERS, handler=HANDLER, follow="10s")
    with pytest.raises(ValueError, match="refire_after must be a positive timedelta"):
        build_retry_dags(ORDERS, handler=HANDLER, refire_after=timedelta(0))
    with pytest.raises(ValueError, match="sweep: 'hourly' is not a valid cron expression"):
        build_retry_dags(ORDERS, handler=HANDLER, sweep="hourly")


def test_custom_delays_below_min_schedule_are_floored_with_a_warning(tmp_path, caplog):
    path = _write(tmp_path, attempts=4, backoff={"kind": "custom", "delays": ["5s", "45s", "10m"]})
    with caplog.at_level(logging.WARNING, logger="airflow_kafka_retry.factory.overrides"):
        dags = build_retry_dags(path, **SCHEDULE, handler=HANDLER, dlt_watch=False)
    assert {d: dag.schedule for d, dag in dags.items()} == {
        "kafka_retry__pay-retry-1": timedelta(seconds=30),
        "kafka_retry__pay-retry-2": timedelta(seconds=45),
        "kafka_retry__pay-retry-3": timedelta(minutes=10),
    }
    assert [r.getMessage() for r in caplog.records] == [
        (
            "tier pay-retry-1: schedule 0:00:05 is shorter than min_schedule 0:00:30; scheduling it every "
            "0:00:30 "
            "(the due check still keeps every record until its due time)"
        )
    ]
    # the sensor waits at most one interval: the floored one
    assert dags["kafka_retry__pay-retry-1"].get_task("wait_for_due").max_wait == timedelta(seconds=30)
    fast = build_retry_dags(
        path, **SCHEDULE, handler=HANDLER, dlt_watch=False, min_schedule=timedelta(seconds=1)
    )
    assert fast["kafka_retry__pay-retry-1"].schedule == timedelta(seconds=5)


def test_same_interval_reuse_gets_one_dag_for_the_shared_topic(tmp_path):
    path = _write(
        tmp_path,
        attempts=6,
        reuse_same_interval=True,
        backoff={"kind": "custom", "delays": ["1m", "2m", "5m", "5m", "5m"]},
    )
    topology = load_topology(path)
    assert [t.topic for t in topology.retry_tiers] == ["pay-retry-1", "pay-retry-2", "pay-retry-3"]
    dags = build_retry_dags(path, **SCHEDULE, handler=HANDLER, dlt_watch=False)
    assert list(dags) == ["kafka_retry__pay-retry-1", "kafka_retry__pay-retry-2", "kafka_retry__pay-retry-3"]
    assert dags["kafka_retry__pay-retry-3"].schedule == timedelta(minutes=5)
    assert dags["kafka_retry__pay-retry-3"].get_task("reprocess").tier == 3


def test_exception_dlts_one_watch_dag_over_every_dlt(tmp_path):
    path = _write(
        tmp_path,
        attempts=2,
        backoff={"kind": "fixed", "delay": "1m"},
        dlt_routing={"-validation-dlt": ["myapp.InvalidOrder"], "-fraud-dlt": ["myapp.Fraud"]},
    )
    dags = build_retry_dags(
        path, **SCHEDULE, handler=HANDLER, dag_id_template="retry_{topic}", on_dlt=[print]
    )
    assert list(dags) == ["retry_pay-retry-1", "retry_pay-dlt"]
    [watch] = dags["retry_pay-dlt"].tasks
    assert watch.task_id == "watch_dlt"
    assert watch.topology == str(path)
    assert tuple(watch.on_dlt) == (print,)
    assert tuple(dags["retry_pay-retry-1"].get_task("reprocess").on_dlt) == (print,)
    # the watch DAG's key takes a schedule only; the exception DLTs have no DAG of their own
    with pytest.raises(TierOverrideError, match=r"tier_overrides\['pay-dlt'\]\['window'\]: unknown key"):
        build_retry_dags(
            path, **SCHEDULE, handler=HANDLER, tier_overrides={"pay-dlt": {"window": "01:00-02:00"}}
        )
    with pytest.raises(TierOverrideError, match=r"tier_overrides\['pay-fraud-dlt'\]: no DAG is built"):
        build_retry_dags(
            path, **SCHEDULE, handler=HANDLER, tier_overrides={"pay-fraud-dlt": {"schedule": "@daily"}}
        )
    hourly = build_retry_dags(
        path, **SCHEDULE, handler=HANDLER, tier_overrides={"pay-dlt": {"schedule": timedelta(hours=1)}}
    )
    assert hourly["kafka_retry__pay-dlt"].schedule == timedelta(hours=1)
    no_dlt = _write(tmp_path, "nodlt.yaml", dlt_strategy="no_dlt")
    assert list(build_retry_dags(no_dlt, **SCHEDULE, handler=HANDLER)) == [
        "kafka_retry__pay-retry-1",
        "kafka_retry__pay-retry-2",
    ]


def test_spark_engine(tmp_path):
    dags = build_retry_dags(
        ORDERS,
        **SCHEDULE,
        handler=HANDLER,
        engine="spark",
        spark_conn_id="spark_yarn",
        options={"batch_size": 500},
        dlt_watch=False,
    )
    reprocess = dags["kafka_retry__orders-retry-2"].get_task("reprocess")
    assert type(reprocess).__name__ == "SparkReprocessTierOperator"
    assert (reprocess.tier, reprocess.handler, reprocess.options, reprocess.cutoff) == (
        2,
        HANDLER,
        {"batch_size": 500},
        CUTOFF_RENDERED_NOW,
    )
    assert reprocess._conn_id == "spark_yarn"
    assert _chain(dags["kafka_retry__orders-retry-2"]) == TIER_CHAIN
    with pytest.raises(ValueError, match="engine must be one of local, spark, got 'flink'"):
        build_retry_dags(ORDERS, **SCHEDULE, handler=HANDLER, engine="flink")


def test_tier_overrides_with_a_window():
    overrides = {
        "orders-retry-3": {
            "schedule": "0 1 * * *",
            "window": "01:00-05:00",
            "timezone": "Europe/Berlin",
            "max_run": "2h",
        },
        "orders-retry-2": {"schedule": timedelta(minutes=5)},
    }
    dags = build_retry_dags(ORDERS, **SCHEDULE, handler=HANDLER, tier_overrides=overrides)
    night = dags["kafka_retry__orders-retry-3"]
    assert type(night.timetable).__name__ == "CronTriggerTimetable"
    assert (night.timetable.expression, str(night.timetable.timezone)) == ("0 1 * * *", "Europe/Berlin")
    wait, reprocess = night.get_task("wait_for_due"), night.get_task("reprocess")
    assert (wait.window, wait.timezone, wait.max_wait) == ("01:00-05:00", "Europe/Berlin", None)
    assert (reprocess.window, reprocess.timezone) == ("01:00-05:00", "Europe/Berlin")
    assert reprocess.max_run in (timedelta(hours=2), 7200, 7200.0, "2h")
    assert dags["kafka_retry__orders-retry-2"].schedule == timedelta(minutes=5)
    assert dags["kafka_retry__orders-retry-2"].get_task("wait_for_due").max_wait == timedelta(minutes=5)
    assert dags["kafka_retry__orders-retry-1"].schedule == timedelta(seconds=30)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"orders-retry-9": {"schedule": "@daily"}},
            (
                r"tier_overrides\['orders-retry-9'\]: no DAG is built for this topic; tiers with a DAG: "
                r"orders-retry-1, "
                r"orders-retry-2, orders-retry-3, orders-dlt"
            ),
        ),
        ({"orders": {"schedule": "@daily"}}, r"tier_overrides\['orders'\]: .*only with include_main=True"),
        (
            {"orders-retry-1": {"windows": "01:00-02:00"}},
            (
                r"tier_overrides\['orders-retry-1'\]\['windows'\]: unknown key; "
                r"known keys: schedule, window, timezone, max_run, pool"
            ),
        ),
        (
            {"orders-retry-1": {"schedule": "every minute"}},
            (
                r"tier_overrides\['orders-retry-1'\]\['schedule'\]: 'every minute' is not a valid cron "
                r"expression"
            ),
        ),
        (
            {"orders-retry-1": {"schedule": 30}},
            (
                r"tier_overrides\['orders-retry-1'\]\['schedule'\]: must be a cron string, a timedelta or a "
                r"timetable"
            ),
        ),
        (
            {"orders-retry-1": {"timezone": "Mars/Olympus"}},
            r"tier_overrides\['orders-retry-1'\]\['timezone'\]: 'Mars/Olympus' is not a known IANA time zone",
        ),
        (
            {"orders-retry-1": {"window": "25:00-02:00"}},
            r"tier_overrides\['orders-retry-1'\]\['window'\]: window '25:00",
        ),
        (
            {"orders-retry-1": {"max_run": "soon"}},
            r"tier_overrides\['orders-retry-1'\]\['max_run'\]: expected a duration",
        ),
        ({"orders-retry-1": "0 1 * * *"}, r"tier_overrides\['orders-retry-1'\]: must be a mapping"),
    ],
)
def test_bad_overrides_name_the_tier_and_key(overrides, message):
    with pytest.raises(TierOverrideError, match=message):
        build_retry_dags(ORDERS, handler=HANDLER, tier_overrides=overrides)


def test_default_args_and_dag_kwargs_reach_every_dag_and_task(tmp_path):
    def alert(context):
        return None

    default_args = {
        "owner": "payments",
        "retries": 2,
        "retry_delay": timedelta(seconds=7),
        "on_failure_callback": alert,
    }
    dags = build_retry_dags(
        ORDERS,
        **SCHEDULE,
        handler=HANDLER,
        default_args=default_args,
        tags=["team-pay"],
        doc_md="our tiers",
        include_main=True,
    )
    assert "kafka_retry__orders" in dags
    assert dags["kafka_retry__orders"].schedule == timedelta(seconds=30)  # main: delay 0, floored
    assert dags["kafka_retry__orders"].get_task("reprocess").tier == 0
    for dag in dags.values():
        assert set(dag.tags) == {"team-pay", "kafka-retry"}
        assert dag.doc_md == "our tiers"
        for task in dag.tasks:
            assert (task.owner, task.retries, task.retry_delay) == ("payments", 2, timedelta(seconds=7)), task
            assert alert in (
                task.on_failure_callback
                if isinstance(task.on_failure_callback, list)
                else [task.on_failure_callback]
            )


def test_dag_kwargs_the_factory_owns_are_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"sets schedule of each DAG itself; use sweep= \(or, with layout='tiers'"
    ):
        build_retry_dags(ORDERS, handler=HANDLER, schedule="@daily")
    with pytest.raises(ValueError, match="max_active_runs must be 1"):
        build_retry_dags(ORDERS, **TIERS, handler=HANDLER, max_active_runs=2)
    with pytest.raises(ValueError, match="dag_id_template must contain '{topic}'"):
        build_retry_dags(ORDERS, handler=HANDLER, dag_id_template="retry")
    in_python = Topology(topic="pay", group_id="pay-svc")
    with pytest.raises(ValueError, match="needs the topology's YAML file.*came from '<python>'"):
        build_retry_dags(in_python, handler=HANDLER)
    assert list(build_retry_dags(load_topology(ORDERS), handler=HANDLER)) == list(
        build_retry_dags(ORDERS, handler=HANDLER)
    )
    with pytest.raises(TypeError, match=r"on_dlt\[0\] is a str, not a notifier"):
        build_retry_dags(ORDERS, handler=HANDLER, on_dlt=["slack"])


def test_built_dags_serialize(tmp_path):
    from airflow.serialization.serialized_objects import DagSerialization

    dags = build_retry_dags(
        ORDERS,
        **TIERS,
        handler=HANDLER,
        tier_overrides={
            "orders-retry-3": {
                "schedule": "0 1 * * *",
                "window": "01:00-05:00",
                "timezone": "Europe/Berlin",
                "max_run": "2h",
            }
        },
    )
    for dag in dags.values():
        data = DagSerialization.to_dict(dag)
        back = DagSerialization.from_dict(json.loads(json.dumps(data)))
        assert sorted(back.task_ids) == sorted(dag.task_ids)


def test_importing_the_package_does_not_import_airflow():
    """Handler code and Spark executors import ``airflow_kafka_retry`` (and the engine) without Airflow."""
    code = (
        "import sys, airflow_kafka_retry\n"
        "from airflow_kafka_retry import BatchFailedError\n"
        "import airflow_kafka_retry.engine.local.engine, airflow_kafka_retry.spark.app\n"
        "import airflow_kafka_retry.policy.timing.windows\n"
        "loaded = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not loaded, loaded\n"
        "assert 'build_retry_dags' in dir(airflow_kafka_retry)\n"
        "from airflow_kafka_retry import build_retry_dags\n"
        "assert 'airflow' in sys.modules\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    import airflow_kafka_retry

    with pytest.raises(AttributeError, match="has no attribute 'build_everything'"):
        airflow_kafka_retry.build_everything


def test_the_default_sweeps_of_an_idle_topology_start_at_most_one_run_a_day():
    from croniter import croniter  # what Airflow's cron timetables use

    dags = build_retry_dags(ORDERS, **TIERS, handler=HANDLER, include_main=True)
    swept = [d for d in dags.values() if type(d.timetable).__name__ == "AssetOrTimeSchedule"]
    assert len(swept) == len(load_topology(ORDERS).retry_tiers) + 2  # main topic, retry tiers, DLT watch
    start = datetime(2026, 3, 2, 0, 0, 30, tzinfo=UTC)  # four weeks of sweeps (ticks are at :00)
    runs = []
    for dag in swept:
        ticks = croniter(dag.timetable.timetable.expression, start)
        while (when := ticks.get_next(datetime)) < start + timedelta(days=28):
            runs.append(when)
    assert len(runs) == 4 * len(swept)  # each DAG once a week
    per_day = {}
    for when in runs:
        per_day[when.date()] = per_day.get(when.date(), 0) + 1
    assert max(per_day.values()) == 1, per_day
