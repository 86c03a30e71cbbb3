"""The redrive DAG (issue 51, part 3): a topology's ``redrive`` policies as tasks on their ``every``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.providers.common.compat.sdk import AirflowSkipException

from airflow_kafka_retry.dlt import redrive as redrive_module
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
from airflow_kafka_retry.operators.redrive import RedriveOperator

REPO = Path(__file__).parents[2]
HANDLER = "handlers.orders:handle"
POLICIES = """
redrive:
  - {name: timeouts, exception: [TimeoutError], after: 1h, every: 1h, max_redrives: 3, rate: 100/s}
  - {name: customers, exception: [myapp.errors.MissingCustomer], after: 30m, every: 90m, max_redrives: 2}
"""


@pytest.fixture
def topology_file(tmp_path: Path) -> str:
    path = tmp_path / "orders.yaml"
    path.write_text((REPO / "dags" / "topologies" / "orders.yaml").read_text() + POLICIES)
    return str(path)


@pytest.mark.parametrize("trigger", ["event", "schedule"])
def test_the_factory_builds_a_redrive_dag_with_a_task_per_policy(topology_file, trigger):
    dags = build_retry_dags(
        topology_file, handler=HANDLER, trigger=trigger, conn_ids={"replay": "kafka_replay"}
    )
    dag = dags["kafka_retry__orders__redrive"]
    assert [t.task_id for t in dag.tasks] == ["redrive_timeouts", "redrive_customers"]
    timeouts, customers = dag.tasks
    assert customers.upstream_task_ids == {"redrive_timeouts"}  # one round at a time: they share the DLT
    assert {t.trigger_rule for t in dag.tasks} == {"all_done"}  # a failed round does not hold the next back
    assert (timeouts.policy, timeouts.kafka_conn_id) == ("timeouts", "kafka_replay")
    assert (timeouts.execution_timeout, customers.execution_timeout) == (
        timedelta(hours=1),
        timedelta(minutes=90),
    )
    assert timeouts.period == customers.period == timedelta(minutes=30)  # the policies' common tick
    assert dag.max_active_runs == 1
    assert "kafka-retry" in dag.tags
    plain = build_retry_dags(REPO / "dags" / "topologies" / "orders.yaml", handler=HANDLER, trigger=trigger)
    assert not [d for d in plain if d.endswith("__redrive")]


def test_a_tick_under_min_schedule_is_raised_to_it(topology_file, tmp_path):
    fast = tmp_path / "fast.yaml"
    fast.write_text(
        Path(topology_file).read_text().replace("every: 1h", "every: 5s").replace("every: 90m", "every: 7s")
    )
    dag = build_retry_dags(str(fast), handler=HANDLER)["kafka_retry__orders__redrive"]
    assert {t.period for t in dag.tasks} == {timedelta(seconds=30)}


def _run(monkeypatch, topology_file, *, at: datetime, run_type: str, period=timedelta(minutes=30)):
    """Execute the ``timeouts`` task with a fake run; what ``run_round`` was given (None: it was not run)."""
    seen: dict = {}

    def fake_round(topology, kafka_config, policy, **kwargs):
        seen.update(policy=policy.name, **kwargs)
        return SimpleNamespace(status="done", to_dict=lambda: {"round_id": "r"})

    monkeypatch.setattr(redrive_module, "run_round", fake_round)
    monkeypatch.setattr(KafkaRetryHook, "kafka_config", lambda self: {})
    op = RedriveOperator(task_id="t", topology=topology_file, policy="timeouts", period=period)
    ti = SimpleNamespace(dag_id="d", run_id="run", task_id="t")
    context = {"dag_run": SimpleNamespace(run_after=at, run_type=run_type), "ti": ti}
    try:
        assert op.execute(context) == {"round_id": "r"}
    except AirflowSkipException:
        return None
    return seen


def test_a_scheduled_tick_runs_a_policy_once_per_its_every_and_a_manual_run_always(
    monkeypatch, topology_file
):
    on_the_hour = datetime(2026, 11, 23, 10, 0, 5, tzinfo=UTC)
    half_past = on_the_hour + timedelta(minutes=30)
    ran = _run(monkeypatch, topology_file, at=on_the_hour, run_type="scheduled")
    assert ran["tick_ms"] == int(on_the_hour.timestamp() * 1000)
    assert ran["airflow"] == {"dag_id": "d", "run_id": "run", "task_id": "t"}
    assert ran["dry_run"] is False
    assert _run(monkeypatch, topology_file, at=half_past, run_type="scheduled") is None
    assert _run(monkeypatch, topology_file, at=half_past, run_type="manual") is not None
    with pytest.raises(ValueError, match="no redrive policy named 'other'"):
        RedriveOperator(task_id="x", topology=topology_file, policy="other").execute(
            {"dag_run": SimpleNamespace(run_after=half_past, run_type="manual"), "ti": None}
        )
