"""ReprocessTierOperator through real Airflow: ``airflow dags test`` on a SQLite metadata DB and the embedded
broker.

Checks what a tier DAG promises: due records processed, failures moved on, the tier group
committed; the DLT notifiers called once, after the commit, with the run's counts; asset events
carrying the counts (read from the metadata DB), and a DAG scheduled on the DLT's asset queued by
them. Then a real ``airflow dags test`` process gets SIGTERM mid-run: Airflow calls ``on_kill``, the
run stops at a chunk boundary, and the broker shows nothing half-committed.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db

from tests.integration.test_spark_operator_dag import SECRET, _airflow_env, _json_lines, _xcom
from tests.support import ledger
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 84
KILL_COUNT = 150
KILL_CHUNK = 10

DAG_FILE = '''
"""Written by tests/integration/test_reprocess_operator_dag.py."""
import json
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_kafka_retry.assets import topic_asset
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier
from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator

TOPOLOGY = {topology!r}
KILL_TOPOLOGY = {kill_topology!r}
OUT = {out!r}
SERVER = {server!r}
DLT = {dlt!r}
CLOSED_WINDOW = {closed_window!r}


def record_notification(context):
    with open(OUT + "/notified.jsonl", "a") as fh:
        fh.write(json.dumps({{"task": context["ti"].task_id, "summary": context["kafka_retry_summary"]}}) +
        "\\n")


with DAG("akr_local_reprocess", schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as dag:
    main_tier = ReprocessTierOperator(
        task_id="reprocess_main",
        topology=TOPOLOGY,
        tier=0,
        handler="tests.support.ledger_handler:indexed",
        value_deserializer="{{{{ params.decoder }}}}",
        options={{"batch_size": 10, "chunk_size": 25}},
        parallelism=2,
        on_dlt=[record_notification,
                DltLogNotifier(message="DLT-NOTE {{{{ kafka_retry_summary.totals.dlt_topics }}}}")],
        asset_server=SERVER,
        params={{"decoder": "tests.support.ledger_handler:decode"}},
    )
    first_tier = ReprocessTierOperator(
        task_id="reprocess_tier_1",
        topology=TOPOLOGY,
        tier=1,
        handler="tests.support.ledger_handler:indexed",
        value_deserializer="tests.support.ledger_handler:decode",
        # a manual run's logical date is before reprocess_main routed anything: take the task's start instead
        cutoff="{{{{ macros.time.time_ns() // 1000000 }}}}",
        on_dlt=[record_notification],
        asset_server=SERVER,
    )

    outside_window = ReprocessTierOperator(
        task_id="outside_window",
        topology=TOPOLOGY,
        tier=2,
        handler="tests.support.ledger_handler:indexed",
        value_deserializer="tests.support.ledger_handler:decode",
        cutoff="{{{{ macros.time.time_ns() // 1000000 }}}}",
        window=CLOSED_WINDOW,
    )

    @task
    def record(summary):
        with open(OUT + "/xcom.json", "w") as fh:
            json.dump(summary, fh)

    main_tier >> first_tier >> outside_window
    record(main_tier.output)


with DAG("akr_on_dlt", schedule=[topic_asset(SERVER, DLT)], start_date=datetime(2024, 1, 1), catchup=False):
    @task
    def look_at_the_dlt():
        pass

    look_at_the_dlt()


with DAG("akr_local_kill", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    ReprocessTierOperator(
        task_id="reprocess_slowly",
        topology=KILL_TOPOLOGY,
        tier=0,
        handler="tests.support.ledger_handler:slow_indexed",
        value_deserializer="tests.support.ledger_handler:decode",
        options={{"batch_size": 5, "chunk_size": {kill_chunk}}},
        retries=0,
    )
'''


def _airflow(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    done = run_airflow(env, *args, timeout=timeout)
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _states(env: dict, dag_id: str) -> dict[str, str]:
    [dag_run] = _json_lines(_airflow(env, "dags", "list-runs", dag_id, "-o", "json").stdout)
    listed = _airflow(env, "tasks", "states-for-dag-run", dag_id, dag_run["run_id"], "-o", "json")
    return {row["task_id"]: row["state"] for row in _json_lines(listed.stdout)}


def _asset_events(db: Path, dag_id: str) -> list[tuple[str, str, dict]]:
    with closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT e.source_task_id, a.uri, e.extra FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id WHERE e.source_dag_id = ? ORDER BY e.id",
            (dag_id,),
        ).fetchall()
    return [(task, uri, json.loads(extra)) for task, uri, extra in rows]


def _closed_window() -> str:
    """A one-hour window (UTC) that opens in two hours: closed for as long as the test runs."""
    hour = (datetime.now(UTC).hour + 2) % 24
    return f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"


@pytest.fixture
def airflow_home(kafka_bootstrap, tmp_path):
    """Topologies with records, a DAG file, a migrated metadata DB and reserialized DAGs."""
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("dagloc"), tmp_path / "topology.yaml")
    kill_topology = ledger.write_topology(ledger.make_topology("dagkill"), tmp_path / "kill-topology.yaml")
    out = tmp_path / "out"
    out.mkdir()
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    env["AKR_SLOW_S"] = "0.25"
    server = kafka_bootstrap.split(",")[0]
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "akr_local_reprocess.py"
    dag_file.write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(tmp_path / "topology.yaml"),
                kill_topology=str(tmp_path / "kill-topology.yaml"),
                out=str(out),
                server=server,
                dlt=topology.dlt_topic,
                kill_chunk=KILL_CHUNK,
                closed_window=_closed_window(),
            )
        )
    )
    seed_metadata_db(env, cwd=REPO)
    _airflow(env, "dags", "reserialize")
    return {
        "env": env,
        "topology": topology,
        "kill_topology": kill_topology,
        "out": out,
        "server": server,
        "ledger": ledger_file,
        "db": Path(env["AIRFLOW_HOME"]) / "airflow.db",
    }


def test_tier_dag_reprocesses_notifies_once_and_emits_asset_events(kafka_bootstrap, airflow_home):
    env, topology, out, server = (airflow_home[k] for k in ("env", "topology", "out", "server"))
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    modes = Counter(mode for mode, _, _ in inputs.records.values())
    _airflow(env, "dags", "unpause", "akr_on_dlt")  # only unpaused DAGs are queued by asset events

    run = run_airflow(env, "dags", "test", "akr_local_reprocess", timeout=600)
    output = run.stdout + run.stderr
    (out / "airflow-output.txt").write_text(output)
    assert _states(env, "akr_local_reprocess") == {
        "reprocess_main": "success",
        "reprocess_tier_1": "success",
        "outside_window": "success",
        "record": "success",
    }, output[-5000:]

    # due records processed, failures moved on, the tier group committed
    tier1, tier2 = topology.tier(1).topic, topology.tier(2).topic
    straight_to_dlt = modes["fatal"] + modes["bad-json"]
    summary = json.loads((out / "xcom.json").read_text())
    assert summary["engine"] == "local"
    assert summary["status"] == "ok"
    assert summary["stopped"] is None
    totals = summary["totals"]
    assert totals["drained"] == COUNT
    assert totals["succeeded"] == modes["ok"]
    assert totals["routed"] == {
        tier1: modes["transient:1"] + modes["transient:2"] + modes["permanent"],
        topology.dlt_topic: straight_to_dlt,
    }
    assert totals["dlt_topics"] == {topology.dlt_topic: straight_to_dlt}
    ends: dict[int, int] = {}
    for _, (_, partition, offset) in inputs.records.items():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    assert (
        ledger.committed(
            kafka_bootstrap, topology.consumer_group(topology.tier(0)), topology.topic, PARTITIONS
        )
        == ends
    )
    tier1_records = ledger.read_all(kafka_bootstrap, tier1)
    assert len(tier1_records) == totals["routed"][tier1]
    tier1_ends: dict[int, int] = {}
    for msg in tier1_records:
        tier1_ends[msg.partition()] = max(tier1_ends.get(msg.partition(), 0), msg.offset() + 1)
    assert (
        ledger.committed(kafka_bootstrap, topology.consumer_group(topology.tier(1)), tier1, PARTITIONS)
        == tier1_ends
    ), "the tier-1 task did not commit its group"
    processed = ledger.processed_ids(airflow_home["ledger"])
    assert sum(processed.values()) == modes["ok"] + modes["transient:1"]  # transient:1 succeeds on attempt 2
    [tier1_summary] = _xcom(airflow_home["db"], "akr_local_reprocess", "reprocess_tier_1", "return_value")
    assert tier1_summary["totals"]["routed"] == {tier2: modes["transient:2"] + modes["permanent"]}
    assert tier1_summary["totals"]["dlt_topics"] == {}

    # started outside its window, a tier reads nothing, succeeds and says why
    [closed] = _xcom(airflow_home["db"], "akr_local_reprocess", "outside_window", "return_value")
    assert closed["stopped"] == "window_closed", closed
    assert closed["status"] == "ok", closed
    assert closed["totals"]["drained"] == 0
    assert {p["stop_reason"] for p in closed["partitions"]} == {"stopped"}
    assert all(
        offset < 0
        for offset in ledger.committed(
            kafka_bootstrap, topology.consumer_group(topology.tier(2)), tier2, PARTITIONS
        ).values()
    )
    assert len(ledger.read_all(kafka_bootstrap, tier2)) == modes["transient:2"] + modes["permanent"]

    # the notifiers: called once (only the main tier dead-lettered), with the run's counts
    notes = [json.loads(line) for line in (out / "notified.jsonl").read_text().splitlines()]
    assert [n["task"] for n in notes] == ["reprocess_main"], notes
    given = notes[0]["summary"]
    assert given["totals"]["dlt_topics"] == {topology.dlt_topic: straight_to_dlt}
    assert given["totals"]["dead_lettered"] == {
        f"{ledger.HANDLER_MODULE}.InvalidOrder": modes["fatal"],
        "airflow_kafka_retry.errors.DeserializationError": modes["bad-json"],
    }
    assert sorted((d["partition"], d["offset"]) for d in given["dead_letters"]) == sorted(
        (p, o) for mode, p, o in inputs.records.values() if mode in ("fatal", "bad-json")
    )
    assert f"DLT-NOTE {{'{topology.dlt_topic}': {straight_to_dlt}}}" in output, "DltLogNotifier did not log"

    # asset events carry the counts; an outlet that got nothing has no event
    events = _asset_events(airflow_home["db"], "akr_local_reprocess")
    url = f"kafka://{server}/"
    assert sorted(events) == sorted(
        [
            (
                "reprocess_main",
                url + tier1,
                {
                    "records": totals["routed"][tier1],
                    "source_topic": topology.topic,
                    "source_tier": 0,
                    "group": topology.consumer_group(topology.tier(0)),
                },
            ),
            (
                "reprocess_main",
                url + topology.dlt_topic,
                {
                    "records": straight_to_dlt,
                    "source_topic": topology.topic,
                    "source_tier": 0,
                    "group": topology.consumer_group(topology.tier(0)),
                },
            ),
            (
                "reprocess_tier_1",
                url + tier2,
                {
                    "records": modes["transient:2"] + modes["permanent"],
                    "source_topic": tier1,
                    "source_tier": 1,
                    "group": topology.consumer_group(topology.tier(1)),
                },
            ),
        ]
    ), events
    # ... and the DAG scheduled on the DLT's asset is queued by the DLT event
    with closing(sqlite3.connect(airflow_home["db"])) as con:
        queued = con.execute("SELECT target_dag_id FROM asset_dag_run_queue").fetchall()
    assert ("akr_on_dlt",) in queued, queued
    assert SECRET not in output


def test_sigterm_stops_the_task_at_a_chunk_boundary(kafka_bootstrap, airflow_home):
    env, topology = airflow_home["env"], airflow_home["kill_topology"]
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, KILL_COUNT, 1)
    ledger_file = airflow_home["ledger"]
    airflow = str(Path(sys.executable).with_name("airflow"))
    process = subprocess.Popen(
        [airflow, "dags", "test", "akr_local_kill"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while sum(ledger.processed_ids(ledger_file).values()) < 3:  # the handler is running: mid-run
            assert process.poll() is None, process.communicate()[0][-5000:]
            assert time.monotonic() < deadline, "the task never started handling records"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    (airflow_home["out"] / "kill-output.txt").write_text(output)
    assert "kill requested: stopping every partition at its next chunk boundary" in output, output[-5000:]
    assert _states(env, "akr_local_kill") == {"reprocess_slowly": "failed"}, output[-5000:]

    [document] = _xcom(airflow_home["db"], "akr_local_kill", "reprocess_slowly", "summary")
    assert document["stopped"] == "killed"
    assert document["status"] == "ok"
    [part] = document["partitions"]
    assert part["stop_reason"] == "stopped"
    assert part["stopped_by"] == "killed"
    boundary = part["committed_offset"]
    assert boundary is not None, part
    assert 0 < boundary < KILL_COUNT, part
    assert boundary % KILL_CHUNK == 0, f"stopped inside a chunk: {part}"
    assert part["left"] == KILL_COUNT - boundary
    assert "stopped (killed) at a chunk boundary" in output

    # nothing half-committed: the group, the ledger and the routed records all end at the boundary
    group = topology.consumer_group(topology.tier(0))
    assert ledger.committed(kafka_bootstrap, group, topology.topic, 1) == {0: boundary}
    below = {rid: mode for rid, (mode, _, offset) in inputs.records.items() if offset < boundary}
    assert set(ledger.processed_ids(ledger_file)) == {rid for rid, mode in below.items() if mode == "ok"}
    routed = {m.key().decode() for m in ledger.read_all(kafka_bootstrap, topology.tier(1).topic)}
    assert routed == {rid for rid, mode in below.items() if mode in ledger.RETRIED_MODES}
    dead = {m.key().decode() for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)}
    assert dead == {rid for rid, mode in below.items() if mode in ("fatal", "bad-json")}
