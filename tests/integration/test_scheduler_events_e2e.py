"""End to end on a real Airflow deployment: the topology's one DAG, run by its one watcher in the triggerer.

The api-server, scheduler, dag-processor and triggerer run as separate processes (LocalExecutor on
PostgreSQL, as in production). The topology has tiers of 10 s and 30 s; the DAG's ``main`` task
(``include_main``) plays the failing service: every record fails there once. Records are produced
continuously (four a second), so records become due continuously on both tiers. Phase 1 runs
undisturbed (its lateness is the figure reported); in phase 2 more records flow and the triggerer is
killed (SIGKILL) as soon as a retry-1 wave has been fired and not yet taken (an event naming the
``retry_1`` lane is in the metadata DB, the tier group's committed offset on the broker still at or
before a head it names), then started again. The topics are created by the DAG's ``ensure_topics``
task, which the watcher starts when it finds them missing.

Checked: every record ends where its script says, exactly once (no loss, no repeat, across the
triggerer's crash); none is handled before its due time; no wave was fired twice (no two events
name the same lane's partition heads); a run ran only the lanes its events named; the DLT watch
reported every dead letter once; a retry-1 run ends only at a gap in the stream that it could not
follow (a steady stream is one run, not a run per wave; how many runs depends on how promptly the
main topic's runs feed retry-1). Reported, not asserted (timing): each tier's lateness in phase 1,
handled time minus due time, p50 and max.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
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

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).parents[2]

PARTITIONS = 2
COUNT = 40  # phase 1: 10 s of a steady stream
CRASH_COUNT = 20  # phase 2
RATE = 4.0  # records produced per second
DELAYS_S = (10, 30)
PHASE_DEADLINE_S = 240
IDLE_S = 15  # before phase 1: nothing due, no run may start
FOLLOW_S = 10  # the factory's default follow (factory/events.py DEFAULT_FOLLOW)
VISIBLE_S = 4  # at most this long from a record's failure on the main topic to its commit on retry-1

DAG_FILE = '''
"""Written by tests/integration/test_scheduler_events_e2e.py."""
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.timed_handler:handle",
    include_main=True,
    on_dlt=[record_notification],
    dag_id_template="ev__{{topic}}",
    options={{"batch_size": 50}},
    default_args={{"retries": 0}},
    layout={layout!r},
))
'''


def lane_events(rows: list[tuple]) -> list[tuple[int, str, dict]]:
    """(event id, lane, the lane's wave) of each lane each topology event names."""
    found = []
    for event_id, extra in rows:
        payload = json_column(extra)["payload"]
        for lane, wave in payload["lanes"].items():
            found.append((event_id, lane, wave))
    return found


def _runs(entries: list[dict], topic: str) -> list[tuple[int, int, int]]:
    """The runs that handled records of ``topic``, in order: (first due_ms, last due_ms, records) each."""
    by_run: dict[str, list[int]] = {}
    for e in entries:
        if e["topic"] == topic:
            assert e["run"], f"a record handled outside an Airflow task run: {e}"
            by_run.setdefault(e["run"], []).append(e["due_ms"])
    return sorted((min(dues), max(dues), len(dues)) for dues in by_run.values())


def test_event_driven_tiers_run_when_records_are_due(
    kafka_bootstrap, airflow_database_url, tmp_path, capsys, request
):
    main = unique_topic("ev")
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
    create_topics(
        kafka_bootstrap, [main], PARTITIONS
    )  # the service's topic; the setup DAG creates the others
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    first, second = scripted(range(COUNT)), scripted(range(COUNT, COUNT + CRASH_COUNT))
    script = {**first, **second}
    timed_ledger, notify_log = tmp_path / "handled.jsonl", tmp_path / "notified.jsonl"

    home = tmp_path / "airflow"
    env = timed_airflow_env(
        home,
        bootstrap=kafka_bootstrap,
        database_url=airflow_database_url,
        timed_ledger=timed_ledger,
        notify_log=notify_log,
        extra={
            # a restarted triggerer takes over the dead one's watchers after this (default 30 s)
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10"
        },
    )
    (home / "dags" / "ev_tiers.py").write_text(
        textwrap.dedent(DAG_FILE.format(topology=str(topology_file), layout="topology"))
    )
    dag_id = f"ev__{main}"
    events_of = (
        "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE a.uri = 'kafka-retry-topology://kafka_default/' || ? AND e.id > ? ORDER BY e.id"
    )
    dlt = topology.dlt_topic
    expected_dlt = sorted(rid for rid, n in script.items() if n == 0)
    retry1, retry2 = (t.topic for t in topology.retry_tiers)
    tier1_group = topology.consumer_group(topology.tier(1))

    def finished(entries: list[dict], ids: dict[str, int]) -> bool:
        finals = {e["id"] for e in entries if e["ok"]} | {
            e["id"] for e in entries if e["topic"] == retry2 and not e["ok"]
        }
        return set(ids) <= finals

    def run_phase(
        cluster: AirflowCluster, ids: dict[str, int], kill_when: Callable[[], str | None] | None = None
    ) -> str | None:
        producer = threading.Thread(
            target=produce_script,
            args=(kafka_bootstrap, main, ids),
            kwargs={"partitions": PARTITIONS, "rate": RATE},
            daemon=True,
        )
        started = time.monotonic()
        producer.start()
        killed = None
        while time.monotonic() - started < PHASE_DEADLINE_S and not finished(read_ledger(timed_ledger), ids):
            if kill_when is not None and killed is None:
                killed = kill_when()
                if killed is not None:
                    cluster.kill("triggerer")
                    cluster.restart("triggerer")
            cluster.check_alive()
            time.sleep(0.2 if kill_when is not None and killed is None else 1)
        producer.join(60)
        return killed

    def wave_in_flight(cluster: AirflowCluster, after_event: int) -> Callable[[], str | None]:
        """A check: a retry-1 wave fired (its due event is in the metadata DB) and not yet taken (the tier
        group's committed offset, read from the broker, is still at or before a head the wave names)."""

        def check() -> str | None:
            waves = [
                w
                for _, lane, w in lane_events(cluster.query(events_of, main, after_event))
                if lane == "retry_1"
            ]
            if not waves:
                return None
            committed = ledger.committed(kafka_bootstrap, tier1_group, retry1, PARTITIONS)
            for wave in waves:
                for head in wave["heads"]:
                    if committed[head["partition"]] <= head["offset"]:
                        where = f"{retry1}[{head['partition']}]@{head['offset']}"
                        return f"retry_1 wave fired at {wave['fired_ms']}: {where} not yet taken"
            return None

        return check

    with AirflowCluster(home, env, cwd=REPO, migrated=True, api_apps="execution") as cluster:
        # as a deployment starts: the watcher finds the retry topics missing and starts the DAG's
        # ensure_topics task (the other lanes skipped), then the service produces
        try:
            cluster.wait_for_success(dag_id, 300, task_id="ensure_topics")
        except AssertionError:
            print(
                "TRIGGERER",
                cluster.log_tail("triggerer", 6000),
                "DAGPROC",
                cluster.log_tail("dag-processor", 4000),
            )
            raise
        # idle (nothing produced yet, nothing due): event mode starts no DAG run; only the DAG's weekly
        # sweep (a "scheduled" run) could, if its tick fell into the window (a tick that passed before
        # the deploy is not run: test_sweep_first_deploy.py)
        [(last_run,)] = cluster.query("SELECT coalesce(max(id), 0) FROM dag_run")
        time.sleep(IDLE_S)
        idle_runs = cluster.query("SELECT dag_id, run_type FROM dag_run WHERE id > ?", last_run)
        assert [r for r in idle_runs if r[1] != "scheduled"] == [], idle_runs
        assert len(idle_runs) == len({dag for dag, _ in idle_runs}), idle_runs
        run_phase(cluster, first)
        phase1 = read_ledger(timed_ledger)
        # what each retry-1 run drained (a run that found nothing due drained 0)
        drains = [
            json_column(value)["totals"]["drained"]
            for (value,) in cluster.query(
                "SELECT value FROM xcom "
                "WHERE dag_id = ? AND task_id = 'retry_1' AND \"key\" = 'return_value'",
                dag_id,
            )
        ]
        waves1 = len(
            [1 for _, lane, _ in lane_events(cluster.query(events_of, main, 0)) if lane == "retry_1"]
        )
        [(last_event,)] = cluster.query("SELECT coalesce(max(id), 0) FROM asset_event")
        killed = run_phase(cluster, second, kill_when=wave_in_flight(cluster, last_event))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(watched_dead_letters(read_ledger(notify_log))) < len(
            expected_dlt
        ):
            time.sleep(1)
        states = Counter(
            (dag, task, state)
            for dag, task, state in cluster.query("SELECT dag_id, task_id, state FROM task_instance")
        )
        due_events = lane_events(cluster.query(events_of, main, 0))
        # which lanes each run's events named, and which tasks each run ran (not skipped)
        named = cluster.query(
            "SELECT r.run_id, e.extra FROM dag_run r "
            "JOIN dagrun_asset_event d ON d.dag_run_id = r.id JOIN asset_event e ON e.id = d.event_id "
            "WHERE r.dag_id = ?",
            dag_id,
        )
        ran = cluster.query(
            # a lane task still running may yet skip itself (its gate): the ones that ran are those done
            "SELECT run_id, task_id FROM task_instance WHERE dag_id = ? AND state IN ('success', 'failed')",
            dag_id,
        )
        # when each run's last task ended: the waves its lanes' gates could have found saved were fired
        # before (each lane decides when it starts)
        run_ended = {
            run_id: int(ended.timestamp() * 1000)
            for run_id, ended in cluster.query(
                "SELECT run_id, MAX(end_date) FROM task_instance WHERE dag_id = ? AND end_date IS NOT NULL "
                "GROUP BY run_id",
                dag_id,
            )
        }
        logs = {name: cluster.log_tail(name, 1500) for name in ("scheduler", "triggerer")}
        failed_logs = [cluster.task_log_tail(dag, 4000) for dag, _, state in states if state == "failed"]
    entries = read_ledger(timed_ledger)
    with capsys.disabled():
        print(
            f"\nevent-driven lateness (handled - due), phase 1: {COUNT} records over {PARTITIONS} partitions "
            f"produced at {RATE:.0f}/s, each failing once on the main topic:"
        )
        for topic, delay in zip((retry1, retry2), DELAYS_S, strict=True):
            handled = [e for e in phase1 if e["topic"] == topic]
            if handled:
                p50, worst = lateness(handled)
                print(
                    f"  {topic} (delay {delay}s, target p50 <= 1.5s, max <= 3s): p50 {p50:.2f}s, max "
                    f"{worst:.2f}s "
                    f"over {len(handled)} records"
                )
        print(
            f"  {len(due_events)} due events in all; phase 2 ({CRASH_COUNT} records, triggerer SIGKILLed "
            "when "
            f"a wave was fired and not yet taken ({killed}) and restarted)"
        )
    assert killed
    # a steady stream of due records is one following run, not a run per wave: a retry-1 run ends only where
    # the stream had a gap it could not follow (the next record it had not seen was due over FOLLOW_S after
    # the last one it drained, less VISIBLE_S for a record produced but not yet committed by the main run)
    runs1 = _runs(phase1, retry1)
    gaps = [(later[0] - earlier[1]) / 1000 for earlier, later in zip(runs1, runs1[1:], strict=False)]
    said = f"retry-1 runs drained {drains} after {waves1} due events; gaps between runs {gaps} s"
    assert sorted(n for n in drains if n) == sorted(n for _, _, n in runs1), said
    assert sum(drains) == COUNT, said
    assert all(gap > FOLLOW_S - VISIBLE_S for gap in gaps), said
    assert finished(entries, script), (
        f"not every record reached its end; handled: "
        f"{Counter((e['topic'], e['attempt'], e['ok']) for e in entries)}; "
        f"task states: {dict(states)}; logs: {logs}"
    )

    # every record: fails once on the main topic, then follows its script, each step exactly once
    by_id: dict[str, list[dict]] = {}
    for e in entries:
        by_id.setdefault(e["id"], []).append(e)
    for rid, succeed_on in script.items():
        path = [(e["topic"], e["attempt"], e["ok"]) for e in by_id[rid]]
        want = [(main, 1, False), (retry1, 2, succeed_on == 2)]
        if succeed_on != 2:
            want.append((retry2, 3, succeed_on == 3))
        assert path == want, (rid, path)
    assert sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, dlt)) == expected_dlt
    tiered = [e for e in entries if e["topic"] in (retry1, retry2)]
    early = [e for e in tiered if e["handled_ms"] < e["due_ms"]]
    assert not early, f"handled before their due time: {early}"
    # runs that a sweep started before the setup DAG created the topics were skipped, none failed
    assert not [k for k in states if k[2] == "failed"], (dict(states), failed_logs[:1], logs)
    # one event per wave: no two events name the same lane's partition heads (the triggerer's restart
    # included)
    waves = Counter((lane, json.dumps(wave["heads"], sort_keys=True)) for _, lane, wave in due_events)
    assert waves, waves
    assert not [w for w, n in waves.items() if n > 1], waves
    # a run started by events ran only the lanes they named (the others skipped themselves, no Kafka client
    # opened), and those whose wave was fired after its newest event (an event Airflow's scheduler left to
    # no run: operators/lane_gate.py)
    lanes_named: dict[str, set[str]] = {}
    newest: dict[str, int] = {}
    for run_id, extra in named:
        payload = json_column(extra)["payload"]
        lanes_named.setdefault(run_id, set()).update(payload["due"])
        newest[run_id] = max(newest.get(run_id, 0), payload["fired_ms"])
    ran_in: dict[str, set[str]] = {}
    for run_id, task_id in ran:
        ran_in.setdefault(run_id, set()).add(task_id)
    assert lanes_named, "no run was started by the topology's watcher"
    for run_id, lanes in lanes_named.items():
        ended = run_ended.get(run_id, 0)
        later = {lane for _, lane, wave in due_events if newest[run_id] < wave["fired_ms"] <= ended}
        extra = ran_in.get(run_id, set()) - lanes - later
        assert not extra, (run_id, ran_in.get(run_id), lanes, later, _task_logs(home, dag_id, run_id, extra))
    # the DLT watch reported each DLT record once (coordinates, not a count: a miss and a duplicate would
    # cancel out)
    assert watched_dead_letters(read_ledger(notify_log)) == dlt_coordinates(kafka_bootstrap, dlt)


def _task_logs(home: Path, dag_id: str, run_id: str, tasks: set[str]) -> str:
    """The logs of ``tasks`` in one run (what their lanes' gates decided)."""
    folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(
        f"--- {p.relative_to(folder)}\n{p.read_text(errors='replace')[-4000:]}"
        for task in sorted(tasks)
        for p in sorted((folder / f"task_id={task}").glob("*.log"))
    )
