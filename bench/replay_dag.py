"""
``python -m bench.replay_rate --through dag``: the same paced replay, run by the replay DAG's task.

A small Airflow home (``sandbox/airflow_stack.py``: SQLite metadata DB, the Kafka connection from
``AIRFLOW_CONN_KAFKA_DEFAULT``) holds a DAG file with :func:`~airflow_kafka_retry.build_dlt_replay_dag` of
the bench's topology; ``airflow dags test`` runs it once with the form's values as the run's conf
(``dry_run`` off, ``to: main``, the rate), as ``tests/integration/test_replay_dag.py`` does. The task's
summary is read from its XCom; the caller reads the copies back as for a replay run in-process.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

from airflow_kafka_retry.sandbox.airflow_stack import airflow_env, seed_metadata_db

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "bench_dlt_replay"
TASK_ID = "replay_dlt"
DAG_FILE = """
from airflow_kafka_retry import build_dlt_replay_dag

dag = build_dlt_replay_dag({topology!r}, dag_id={dag_id!r})
"""
#: ``airflow dags test`` of the whole replay: its records at the rate, and Airflow's start-up, at most.
TIMEOUT_MARGIN_S = 300.0


def run_replay_dag(
    home: Path, topology: dict[str, Any], bootstrap: str, rate: float, records: int
) -> dict[str, Any]:
    """Run the replay DAG once (see the module's docstring); its task's summary and the command's seconds."""
    topology_file = home / "topology.yaml"
    home.mkdir(parents=True, exist_ok=True)
    topology_file.write_text(yaml.safe_dump(topology))
    connection = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    env = airflow_env(home / "airflow", connections={"kafka_default": connection}, pythonpath=[REPO])
    (home / "airflow" / "dags" / "bench_replay.py").write_text(
        DAG_FILE.format(topology=str(topology_file), dag_id=DAG_ID)
    )
    seed_metadata_db(env, cwd=REPO)
    airflow = str(Path(sys.executable).with_name("airflow"))
    _run(env, [airflow, "dags", "reserialize"], 300)
    conf = {"dry_run": False, "to": "main", "rate": rate}
    began = time.monotonic()
    done = _run(
        env,
        [airflow, "dags", "test", DAG_ID, "2026-01-01T00:00:00+00:00", "-c", json.dumps(conf)],
        records / rate + TIMEOUT_MARGIN_S,
    )
    took = time.monotonic() - began
    (home / "dags-test-output.txt").write_text(done.stdout + done.stderr)
    with closing(sqlite3.connect(home / "airflow" / "airflow.db")) as con:
        rows = con.execute(
            'SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND "key" = ?',
            (DAG_ID, TASK_ID, "return_value"),
        ).fetchall()
    if len(rows) != 1:
        raise RuntimeError(
            f"the replay task left {len(rows)} summaries; output in {home}/dags-test-output.txt"
        )
    return {"summary": json.loads(rows[0][0]), "dags_test_seconds": round(took, 2)}


def _run(env: dict[str, str], command: list[str], timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(
        command, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:4])} failed ({done.returncode}): {done.stderr[-3000:]}")
    return done
