"""On a real Airflow: a lane whose event the scheduler left to no run is run by the other lane's run.

Airflow 3.3's scheduler queues a DAG's run on an asset once (``asset_dag_run_queue``, insert or nothing)
and makes the run from the events up to that queue row's time. A second event of the asset that comes
before the run is made is consumed by no run until the asset's next event (apache/airflow#70970). A CI
run saw it: two lanes of a topology fired 0.5 s apart, the second waited 45 s (``refire_after``).

Here the scheduler is frozen (SIGSTOP) while the DLT watch's lane fires and then a retry-1 record
becomes due; it is let go once both events are in the metadata DB. ``refire_after`` is 10 minutes, so
only the run of the first event can run retry-1 in time. Checked: the run that was made got the first
event only (the second was stranded, as in Airflow), its ``due`` task ran both lanes, and the retry-1
record was handled once.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

from tests.support.timed_airflow import timed_airflow_env
from tests.support.timed_stream import json_column, read_ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(360)]

REPO = Path(__file__).parents[2]
#: how long the retry-1 record may take once the scheduler goes on: far below refire_after (10 min), the
#: only other way it would run
HANDLED_WITHIN_S = 120

DAG_FILE = '''
"""Written by tests/integration/test_stranded_asset_event.py."""
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.timed_handler:handle",
    on_dlt=[record_notification],
    dag_id_template="st__{{topic}}",
    default_args={{"retries": 0}},
    refire_after=timedelta(minutes=10),
))
'''

EVENTS = (
    "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
    "WHERE a.uri = 'kafka-retry-topology://kafka_default/' || ? ORDER BY e.id"
)


def _produce(bootstrap: str, topic: str, value: dict, headers: list | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=json.dumps(value).encode(), headers=headers or [])
    assert producer.flush(30) == 0


def _wait(what: str, check, timeout: float, cluster: AirflowCluster):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s\n{cluster.log_tail('triggerer', 3000)}")
        time.sleep(0.3)
    return found


def test_a_lane_whose_event_the_scheduler_left_behind_runs_in_the_other_lanes_run(
    kafka_bootstrap, airflow_database_url, tmp_path
):
    main = unique_topic("st")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(json.dumps({"topic": main, "group_id": f"{main}-svc", "attempts": 2}))
    topology = load_topology(topology_file)
    create_topics(kafka_bootstrap, [main], 1)
    timed_ledger, notify_log = tmp_path / "handled.jsonl", tmp_path / "notified.jsonl"
    home = tmp_path / "airflow"
    env = timed_airflow_env(
        home,
        bootstrap=kafka_bootstrap,
        database_url=airflow_database_url,
        timed_ledger=timed_ledger,
        notify_log=notify_log,
    )
    (home / "dags" / "st.py").write_text(textwrap.dedent(DAG_FILE.format(topology=str(topology_file))))
    dag_id = f"st__{main}"
    [retry1] = [t.topic for t in topology.retry_tiers]
    try:
        with AirflowCluster(home, env, cwd=REPO, migrated=True) as cluster:
            cluster.wait_for_success(dag_id, 120, task_id="ensure_topics")  # the watcher's setup event
            [(runs_before,)] = cluster.query("SELECT count(*) FROM dag_run WHERE dag_id = ?", dag_id)
            cluster.pause("scheduler")
            try:
                _produce(kafka_bootstrap, topology.dlt_topic, {"id": "dead"})
                first = _wait(
                    "the DLT watch's event", lambda: _lane_events(cluster, main, "watch_dlt"), 60, cluster
                )
                due = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(0))]
                _produce(kafka_bootstrap, retry1, {"id": "r1", "succeed_on": 2}, due)
                second = _wait("retry-1's event", lambda: _lane_events(cluster, main, "retry_1"), 60, cluster)
                queued = cluster.query(
                    "SELECT count(*) FROM asset_dag_run_queue WHERE target_dag_id = ?", dag_id
                )
            finally:
                cluster.resume("scheduler")
            assert first[0][0] < second[0][0], (first, second)  # two events, the DLT watch's first
            assert queued == [(1,)], queued  # one queue row for both: the second event found it there
            handled = _wait(
                "the retry-1 record handled",
                lambda: [e for e in read_ledger(timed_ledger) if e["id"] == "r1"],
                HANDLED_WITHIN_S,
                cluster,
            )
            runs = cluster.query(
                "SELECT r.run_id, count(d.event_id) FROM dag_run r "
                "LEFT JOIN dagrun_asset_event d ON d.dag_run_id = r.id WHERE r.dag_id = ? "
                "GROUP BY r.id, r.run_id ORDER BY r.id",
                dag_id,
            )[runs_before:]
            # the handler wrote its line before its task ended: wait for the first run to end
            ended = (
                "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ? AND state IN ('success', 'failed')"
            )
            if runs:
                _wait("the first run to end", lambda: cluster.query(ended, dag_id, runs[0][0]), 60, cluster)
            ran = cluster.query(
                "SELECT run_id, task_id FROM task_instance WHERE dag_id = ? AND state = 'success' "
                "AND task_id IN ('retry_1', 'watch_dlt')",
                dag_id,
            )
            due_log = cluster.task_log_tail(dag_id, 4000)
    finally:
        delete_topics(kafka_bootstrap, topology_topics(topology))
    # the run made when the scheduler went on got the first event only: the second was stranded
    assert runs, "no run was made after the scheduler went on"
    run_id, consumed = runs[0]
    assert consumed == 1, runs
    # and that run ran both lanes: retry-1 from the wave its watcher saved
    assert {task for r, task in ran if r == run_id} == {"retry_1", "watch_dlt"}, (ran, due_log[-3000:])
    assert "also due: retry_1" in due_log, due_log[-3000:]
    assert [(e["topic"], e["attempt"], e["ok"]) for e in handled] == [(retry1, 2, True)], handled


def _lane_events(cluster: AirflowCluster, main: str, lane: str) -> list[tuple[int, dict]]:
    return [
        (event_id, payload)
        for event_id, extra in cluster.query(EVENTS, main)
        if lane in (payload := json_column(extra).get("payload") or {}).get("due", ())
    ]
