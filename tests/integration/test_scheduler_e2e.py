"""End to end on a real Airflow deployment, one for the module (two DAG files, one after the other).

1. A lane whose event the scheduler left to no run is run by the other lane's run (event mode).
   Airflow 3.3's scheduler queues a DAG's run on an asset once (``asset_dag_run_queue``, insert or
   nothing) and makes the run from the events up to that queue row's time. A second event of the asset
   that comes before the run is made is consumed by no run until the asset's next event
   (apache/airflow#70970). A CI run saw it: two lanes of a topology fired 0.5 s apart, the second waited
   45 s (``refire_after``). Here the scheduler is frozen (SIGSTOP) while the DLT watch's lane fires and
   then a retry-1 record becomes due; it is let go once both events are in the metadata DB.
   ``refire_after`` is 10 minutes, so only the run of the first event can run retry-1 in time. Checked:
   the run that was made got the first event only (the second was stranded, as in Airflow), its ``due``
   task ran both lanes, and the retry-1 record was handled once. (Its DAG then idles: no event, no run.)
2. Factory-built tier DAGs (schedule mode) run by the scheduler. The topology has tiers of 10 s and
   20 s; the main topic's DAG (``include_main``) plays the failing service: every record fails there
   once. Records then go through retry-1 and retry-2, and the ones that never succeed end in the DLT.

Checked: every record ends where its script says (succeeded on retry-1, on retry-2, or in the DLT,
exactly once), no record is handled before its due time, the reprocess task notified the DLT
records. Reported, not asserted (timing): each tier's lateness, p50 and max of handled time minus
due time, against the target of 10 % of the tier delay plus the scheduler's own cycle.

The api-server (its execution API), scheduler, dag-processor and triggerer run as separate processes
(LocalExecutor on PostgreSQL, as in production: see airflow_kafka_retry/sandbox/airflow_stack.py and
sandbox/postgres.py); each test reads only its own lines of the deployment's handler ledgers.
"""

from __future__ import annotations

import json
import statistics
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

from tests.support import ledger
from tests.support.timed_airflow import timed_airflow_env
from tests.support.timed_stream import (
    dlt_coordinates,
    json_column,
    lateness,
    produce_script,
    read_ledger,
    scripted,
    watched_dead_letters,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).parents[2]

PARTITIONS = 2
COUNT = 24
DELAYS_S = (10, 20)
MIN_SCHEDULE = timedelta(seconds=10)  # the main topic's DAG (delay 0) runs every 10 s
DEADLINE_S = 240  # from the first DAG run; the path takes about 10 + 10 + 20 s plus scheduling

DAG_FILE = '''
"""Written by tests/integration/test_scheduler_e2e.py."""
from datetime import datetime, timedelta

from airflow_kafka_retry import build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.timed_handler:handle",
    include_main=True,
    min_schedule=timedelta(seconds={min_schedule}),
    on_dlt=[record_notification],
    dag_id_template="e2e__{{topic}}",
    options={{"batch_size": 50}},
    default_args={{"retries": 0}},
    trigger="schedule",
))
'''


#: how long the retry-1 record may take once the scheduler goes on: far below refire_after (10 min), the
#: only other way it would run
HANDLED_WITHIN_S = 120

STRANDED_DAG_FILE = '''
"""Written by tests/integration/test_scheduler_e2e.py (the stranded-event test)."""
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


class Stack(NamedTuple):
    cluster: AirflowCluster
    timed_ledger: Path
    notify_log: Path


@pytest.fixture(scope="module")
def stack(kafka_bootstrap, airflow_databases, tmp_path_factory) -> Iterator[Stack]:
    """One deployment for the module's tests: each writes its DAG file into it (parsed when it appears)."""
    root = tmp_path_factory.mktemp("scheduler-e2e")
    url = airflow_databases.new()
    timed_ledger, notify_log, home = root / "handled.jsonl", root / "notified.jsonl", root / "airflow"
    env = timed_airflow_env(
        home, bootstrap=kafka_bootstrap, database_url=url, timed_ledger=timed_ledger, notify_log=notify_log
    )
    try:
        with AirflowCluster(home, env, cwd=REPO, migrated=True, api_apps="execution") as cluster:
            yield Stack(cluster, timed_ledger, notify_log)
    finally:
        airflow_databases.pg.drop_database(url.rsplit("/", 1)[1])


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


def _seconds(value: datetime | str | None) -> float | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp() if value else None


def _breakdown(task_times: list[tuple], dag_id: str, first_due_ms: int) -> str:
    """Where the lateness goes: first due time -> sensor end -> reprocess start -> reprocess end (medians)."""
    runs: dict[str, dict[str, tuple]] = {}
    for dag, run_id, task, state, start, end in task_times:
        if dag == dag_id:
            runs.setdefault(run_id, {})[task] = (state, _seconds(start), _seconds(end))
    drained = [
        r
        for r in runs.values()
        if r.get("reprocess", ("",))[0] == "success" and r.get("wait_for_due", ("",))[0] == "success"
    ]
    if not drained:
        return "no run drained records"
    gap = statistics.median(r["reprocess"][1] - r["wait_for_due"][2] for r in drained)
    took = statistics.median(r["reprocess"][2] - r["reprocess"][1] for r in drained)
    waited = statistics.median(r["wait_for_due"][2] - r["wait_for_due"][1] for r in drained)
    resumed = min(r["wait_for_due"][2] for r in drained) - first_due_ms / 1000
    return (
        f"first due record -> due sensor done {resumed:.1f}s (trigger fires, the scheduler resumes the "
        f"sensor in a new task process; the sensor ran {waited:.1f}s in all, deferral included), sensor done "
        f"-> reprocess started {gap:.1f}s, reprocess task {took:.1f}s; over {len(drained)} run(s)"
    )


def test_a_lane_whose_event_the_scheduler_left_behind_runs_in_the_other_lanes_run(
    stack, kafka_bootstrap, tmp_path
):
    main = unique_topic("st")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(json.dumps({"topic": main, "group_id": f"{main}-svc", "attempts": 2}))
    topology = load_topology(topology_file)
    create_topics(kafka_bootstrap, [main], 1)
    cluster, timed_ledger = stack.cluster, stack.timed_ledger
    (cluster.home / "dags" / "st.py").write_text(
        textwrap.dedent(STRANDED_DAG_FILE.format(topology=str(topology_file)))
    )
    dag_id = f"st__{main}"
    [retry1] = [t.topic for t in topology.retry_tiers]
    try:
        cluster.wait_for_success(dag_id, 300, task_id="ensure_topics")  # the watcher's setup event
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
            queued = cluster.query("SELECT count(*) FROM asset_dag_run_queue WHERE target_dag_id = ?", dag_id)
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
        ended = "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ? AND state IN ('success', 'failed')"
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


def test_scheduler_runs_the_tiers_on_time(stack, kafka_bootstrap, tmp_path, capsys, request):
    main = unique_topic("e2e")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        json.dumps(
            {
                "topic": main,
                "group_id": f"{main}-svc",
                "attempts": 3,
                "backoff": {"kind": "custom", "delays": [f"{d}s" for d in DELAYS_S]},
            }
        )
    )
    topology = load_topology(topology_file)
    create_topics(kafka_bootstrap, [main], PARTITIONS)  # the service's topic; the DAGs create the others
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    script = scripted(range(COUNT))
    produce_script(kafka_bootstrap, main, script, partitions=PARTITIONS)
    (stack.cluster.home / "dags" / "e2e_tiers.py").write_text(
        textwrap.dedent(
            DAG_FILE.format(topology=str(topology_file), min_schedule=int(MIN_SCHEDULE.total_seconds()))
        )
    )
    dlt = topology.dlt_topic
    expected_dlt = sorted(rid for rid, n in script.items() if n == 0)
    retry1, retry2 = (t.topic for t in topology.retry_tiers)

    def done(entries: list[dict]) -> bool:
        finals = {e["id"] for e in entries if e["ok"]} | {
            e["id"] for e in entries if e["topic"] == retry2 and not e["ok"]
        }
        return len(finals) == COUNT

    # the deployment's ledgers: this test's lines only (the module's other DAG writes there too)
    def handled() -> list[dict]:
        return [e for e in read_ledger(stack.timed_ledger) if e["topic"] in (main, retry1, retry2)]

    def notified() -> list[dict]:
        return [n for n in read_ledger(stack.notify_log) if n["dag_id"].startswith(f"e2e__{main}")]

    cluster = stack.cluster
    started = time.monotonic()  # from the DAG file's writing: its parse is part of the path
    while time.monotonic() - started < DEADLINE_S and not done(handled()):
        cluster.check_alive()
        time.sleep(2)
    # the last reprocess run commits and notifies after its handler returned; the DLT watch DAG
    # (every 10 s, the fastest schedule) then reports the DLT records too
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(watched_dead_letters(notified())) < len(expected_dlt):
        time.sleep(1)
    states = Counter(
        (dag, task, state)
        for dag, task, state in cluster.query("SELECT dag_id, task_id, state FROM task_instance")
    )
    task_times = cluster.query(
        "SELECT dag_id, run_id, task_id, state, start_date, end_date FROM task_instance"
    )
    logs = {name: cluster.log_tail(name, 1500) for name in ("scheduler", "triggerer")}
    entries = handled()
    assert done(entries), (
        f"not every record reached its end within {DEADLINE_S}s; handled: "
        f"{Counter((e['topic'], e['attempt'], e['ok']) for e in entries)}; task states: "
        f"{dict(states)}; logs: {logs}"
    )

    # every record: fails once on the main topic, then follows its script, each step once
    by_id: dict[str, list[dict]] = {}
    for e in entries:
        by_id.setdefault(e["id"], []).append(e)
    for rid, succeed_on in script.items():
        path = [(e["topic"], e["attempt"], e["ok"]) for e in by_id[rid]]
        want = [(main, 1, False), (retry1, 2, succeed_on == 2)]
        if succeed_on != 2:
            want.append((retry2, 3, succeed_on == 3))
        assert path == want, (rid, path)
    dlt_ids = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, dlt))
    assert dlt_ids == expected_dlt
    # never early: a retry tier record is handled at or after its due time
    tiered = [e for e in entries if e["topic"] in (retry1, retry2)]
    assert all(e["due_ms"] is not None for e in tiered)
    early = [e for e in tiered if e["handled_ms"] < e["due_ms"]]
    assert not early, f"handled before their due time: {early}"
    # the reprocess runs that dead-lettered records notified them, with the counts
    notes = notified()
    reprocess_notes = [n for n in notes if n["task_id"] == "reprocess"]
    assert sum(sum(n["summary"]["totals"]["dead_lettered"].values()) for n in reprocess_notes) == len(
        expected_dlt
    )
    assert {n["dag_id"] for n in reprocess_notes} == {f"e2e__{retry2}"}
    # ... and the DLT watch reported each DLT record once, to the same notifier
    #     (the same coordinates, not the same count: a miss and a duplicate would cancel out in a sum)
    assert watched_dead_letters(notes) == dlt_coordinates(kafka_bootstrap, dlt), [
        n for n in notes if n["task_id"] == "watch_dlt"
    ]
    assert {n["dag_id"] for n in notes if n["task_id"] == "watch_dlt"} == {f"e2e__{dlt}"}

    with capsys.disabled():
        print(f"\nend-to-end lateness (handled - due), {COUNT} records over {PARTITIONS} partitions:")
        for topic, delay in zip((retry1, retry2), DELAYS_S, strict=True):
            p50, worst = lateness([e for e in entries if e["topic"] == topic])
            print(
                f"  {topic} (delay {delay}s, target <= {delay * 0.1:.0f}s + scheduler cycle): "
                f"p50 {p50:.2f}s, max {worst:.2f}s"
            )
            first_due = min(e["due_ms"] for e in entries if e["topic"] == topic)
            print(f"    where it goes: {_breakdown(task_times, f'e2e__{topic}', first_due)}")
