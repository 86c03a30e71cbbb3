"""A swept DAG's first deploy: Airflow's scheduler-side timetable does not run the tick that just passed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pendulum
import pytest
from airflow.serialization.serialized_objects import decode_timetable, encode_timetable
from airflow.timetables.base import TimeRestriction

from airflow_kafka_retry.factory.retry_dags import build_retry_dags

REPO = Path(__file__).parents[2]
ORDERS = REPO / "dags" / "topologies" / "orders.yaml"


def _first_run(dag, now: datetime) -> datetime:
    """When the scheduler would start the first run of ``dag``'s sweep, deployed at ``now`` (no runs yet)."""
    sweep = decode_timetable(encode_timetable(dag.timetable.timetable))  # what the scheduler holds
    with mock.patch("airflow.timetables.trigger.utcnow", return_value=pendulum.instance(now)):
        info = sweep.next_dagrun_info(
            last_automated_data_interval=None,
            restriction=TimeRestriction(earliest=None, latest=None, catchup=False),
        )
    assert info is not None
    return info.run_after


@pytest.mark.parametrize("sweep", [None, "15 3 * * *"], ids=["default weekly", "a daily cron string"])
@pytest.mark.parametrize("after_tick", [timedelta(seconds=1), timedelta(hours=5)])
def test_a_sweep_tick_that_passed_before_the_first_deploy_is_not_run(sweep, after_tick: timedelta) -> None:
    from croniter import croniter

    dag = build_retry_dags(ORDERS, handler="handlers.orders:handle", sweep=sweep)["kafka_retry__orders"]
    tick = croniter(dag.timetable.timetable.expression, datetime(2026, 11, 29, tzinfo=UTC)).get_next(datetime)
    first = _first_run(dag, tick + after_tick)
    assert first > tick + after_tick, f"the tick at {tick} would run on deploy, {after_tick} after it"
    assert first == croniter(dag.timetable.timetable.expression, tick).get_next(datetime)
