"""The DLT replay DAG through real Airflow: ``airflow dags test`` with a dry run, then a real run.

Airflow runs in a subprocess with its own ``AIRFLOW_HOME`` and a SQLite metadata DB; the Kafka
connection comes from ``AIRFLOW_CONN_KAFKA_DEFAULT`` (JSON), as a deployment would set it. The
form's values are passed as the run's conf (``-c``), which overrides the DAG's params.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from airflow_kafka_retry.dlt.replay_status import ReplayStatusView
from airflow_kafka_retry.engine.logs.replay_log import log_topic
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db

from tests.integration.test_dlt_replay import PERMANENT, fill_dlt, ids_of, replayed_copies
from tests.integration.test_spark_operator_dag import REPO, _airflow_env, _json_lines, _xcom
from tests.support import ledger
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DAG_ID = "akr_dlt_replay"
DAG_FILE = '''
"""Written by tests/integration/test_replay_dag.py."""
from airflow_kafka_retry import build_dlt_replay_dag

dag = build_dlt_replay_dag({topology!r}, dag_id={dag_id!r},
                           transforms={{"fix": "tests.support.dlt_transforms:fix"}})
'''


def test_replay_dag_dry_run_then_real_run(kafka_bootstrap, tmp_path):
    topology, inputs, ledger_file, _ = fill_dlt(kafka_bootstrap, tmp_path, "dagreplay")
    topology_file = tmp_path / "topology.yaml"
    ledger.write_topology(topology, topology_file)
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    marker = tmp_path / "imported.txt"
    env["AKR_IMPORT_MARKER"] = str(marker)
    dags = Path(env["AIRFLOW__CORE__DAGS_FOLDER"])
    (dags / "akr_dlt_replay.py").write_text(DAG_FILE.format(topology=str(topology_file), dag_id=DAG_ID))

    def _airflow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    seed_metadata_db(env, cwd=REPO)
    done = _airflow("dags", "reserialize")
    assert done.returncode == 0, done.stderr[-3000:]
    wanted = ids_of(inputs, "permanent", 1)
    form = {"exception": PERMANENT, "partition": "1", "transform": "fix"}

    # 1. the form's defaults: a dry run. It lists every move in the task log and XCom, and moves nothing
    dry = _airflow("dags", "test", DAG_ID, "2026-01-01T00:00:00+00:00", "-c", json.dumps(form), timeout=600)
    output = dry.stdout + dry.stderr
    (tmp_path / "dry-run-output.txt").write_text(output)
    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    [summary] = _xcom(db, DAG_ID, "replay_dlt", "return_value")
    assert summary["dry_run"] is True, output[-5000:]
    assert summary["moved"] == 0, output[-5000:]
    assert summary["selected"] == len(wanted) == len(summary["moves"]) > 0
    assert summary["filters"]["exception"] == [PERMANENT]
    assert summary["filters"]["partition"] == [1]
    for move in summary["moves"]:
        target = f"{topology.topic}[{move['target_partition']}]"
        line = f"{topology.dlt_topic}[1]@{move['offset']} -> {target} (transformed)"
        assert line in output, f"{line!r} not in the task log"
    assert f"would move {len(wanted)} record(s) from {topology.dlt_topic}" in output
    assert replayed_copies(kafka_bootstrap, topology.topic) == []
    assert not any(m.key().startswith(b"record/") for m in _log(kafka_bootstrap, topology))
    assert '"mode"' not in json.dumps(summary), "payloads in XCom"

    # 2. the same form with dry_run off moves exactly the selection, with the run's replay id
    real = _airflow(
        "dags",
        "test",
        DAG_ID,
        "2026-01-02T00:00:00+00:00",
        "-c",
        json.dumps({**form, "dry_run": False, "rate": "50/s"}),
        timeout=600,
    )
    output = real.stdout + real.stderr
    (tmp_path / "real-run-output.txt").write_text(output)
    runs = _airflow("dags", "list-runs", DAG_ID, "-o", "json")
    assert sorted(r["state"] for r in _json_lines(runs.stdout)) == ["success", "success"], output[-5000:]
    summaries = _xcom(db, DAG_ID, "replay_dlt", "return_value")
    [moved] = [s for s in summaries if not s["dry_run"]]
    assert moved["moved"] == moved["selected"] == len(wanted), output[-5000:]
    assert moved["replay_id"].startswith(f"{DAG_ID}.")
    assert moved["replay_id"].endswith(".replay_dlt")
    copies = replayed_copies(kafka_bootstrap, topology.topic)
    assert sorted(m.key().decode() for m in copies) == sorted(wanted)
    assert f"moved {len(wanted)} record(s) from {topology.dlt_topic}" in output
    # the form's rate was held, and the replay's status names the Airflow run that started it
    assert moved["rate"] == 50.0
    (status,) = ReplayStatusView(topology, {"bootstrap.servers": kafka_bootstrap}).read(moved["replay_id"])
    assert (status["state"], status["moved"], status["rate"]) == ("done", len(wanted), 50.0)
    assert status["started_by"]["airflow"]["dag_id"] == DAG_ID
    assert status["started_by"]["airflow"]["task_id"] == "replay_dlt"

    # 3. whoever triggers the DAG picks a transform by name from the DAG's list: a module path is refused
    #    before the run reads anything, and nothing is imported for it (not even in a dry run)
    for i, transform in enumerate(
        ("tests.support.import_marker:transform", "tests.support.exits_on_import:x")
    ):
        refused = _airflow(
            "dags",
            "test",
            DAG_ID,
            f"2026-01-0{3 + i}T00:00:00+00:00",
            "-c",
            json.dumps({"transform": transform, "dry_run": True}),
            timeout=600,
        )
        output = refused.stdout + refused.stderr
        (tmp_path / f"refused-{i}-output.txt").write_text(output)
        # the form's choices are the DAG's transforms (a param enum): Airflow refuses the value before it
        # creates the run, so no run, no task and no import happen for it
        refusal = f"Invalid input for param transform: {transform!r} is not one of [None, 'fix']"
        assert refused.returncode != 0, output[-5000:]
        assert refusal in output, output[-5000:]
        assert not marker.exists(), "a transform that is not on the DAG's list was imported"
        with closing(sqlite3.connect(db)) as con:
            runs = con.execute(
                "SELECT r.state FROM dag_run r WHERE r.dag_id = ? AND substr(r.logical_date, 1, 10) = ?",
                (DAG_ID, f"2026-01-0{3 + i}"),
            ).fetchall()
        assert runs == [], f"a run was created for a refused transform: {runs}"
    assert len(_xcom(db, DAG_ID, "replay_dlt", "return_value")) == 2, "a refused run reported a replay"
    assert len(replayed_copies(kafka_bootstrap, topology.topic)) == len(wanted)

    # 4. an exception filter is matched by name: the class's module is not imported to filter
    named = _airflow(
        "dags",
        "test",
        DAG_ID,
        "2026-01-05T00:00:00+00:00",
        "-c",
        json.dumps({"exception": "tests.support.import_marker.MarkerError"}),
        timeout=600,
    )
    assert named.returncode == 0, (named.stdout + named.stderr)[-5000:]
    last = _xcom(db, DAG_ID, "replay_dlt", "return_value")[-1]
    assert last["filters"]["exception"] == ["tests.support.import_marker.MarkerError"]
    assert last["selected"] == 0
    assert not marker.exists(), "an exception filter imported the module of its class"


def _log(bootstrap: str, topology) -> list:
    from airflow_kafka_retry.sandbox.scratch_topics import admin_client

    name = log_topic(topology.dlt_topic)
    return (
        ledger.read_all(bootstrap, name)
        if name in admin_client(bootstrap).list_topics(timeout=10).topics
        else []
    )
