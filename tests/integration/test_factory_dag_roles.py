"""A connection per role through real Airflow: ``airflow dags test`` of a topology DAG given ``conn_ids``.

The base connection (``kafka_default``) is not defined at all, so a task that fell back to it would fail.
Each role has a connection of its own; the tier runs' has a client id of its own. In the first run the DLT
watch's connection is missing: ``ensure_topics`` and the tier tasks succeed, and only ``watch_dlt`` fails,
naming its connection. In the second run the DLT watch's connection is defined and the tier runs' is the
missing one: ``watch_dlt`` reports the dead letters, and only the tier tasks fail, naming theirs. The
watcher is registered with its own connection id (no configuration) on the asset keyed by the base id.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics

from tests.integration.test_factory_dag import (
    PARTITIONS,
    _produce_tier_records,
    _query,
    _states,
)
from tests.support import ledger
from tests.support.factory_dag_files import dags_test_env, kafka_connection, write_dag_file, write_topology
from tests.support.trigger_rows import trigger_kwargs
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
ROLES = {
    "setup": "akr_role_setup",
    "tiers": "akr_role_tiers",
    "dlt_watch": "akr_role_dlt_watch",
    "watcher": "akr_role_watcher",
}


def test_each_task_of_a_topology_dag_uses_its_roles_connection(kafka_bootstrap, tmp_path, request):
    topology_file, topology = write_topology(tmp_path, "rdag")
    main = topology.topic
    retry1 = topology.tier(1).topic
    # every topic exists, so the tier run does not depend on which task of the run comes first
    create_topics(kafka_bootstrap, topology_topics(topology), PARTITIONS)
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    records = _produce_tier_records(kafka_bootstrap, retry1)
    ledger_file, notify_log = tmp_path / "ledger.txt", tmp_path / "notified.jsonl"
    home = tmp_path / "airflow"

    every = {
        ROLES["setup"]: kafka_connection(kafka_bootstrap),
        ROLES["tiers"]: kafka_connection(kafka_bootstrap, **{"client.id": "akr-role-tiers"}),
        ROLES["dlt_watch"]: kafka_connection(kafka_bootstrap),
        ROLES["watcher"]: kafka_connection(kafka_bootstrap),
    }  # and no kafka_default

    def env_without(role: str) -> dict[str, str]:
        return dags_test_env(home, tmp_path, {conn: c for conn, c in every.items() if conn != ROLES[role]})

    write_dag_file(
        home / "dags", "akr_roles.py", writer=__name__, topology_file=topology_file, conn_ids=ROLES
    )
    db = home / "airflow.db"
    dag_id = f"akr_{main}"

    def dags_test(env: dict[str, str]) -> tuple[dict[str, str], str]:
        """A run no event started: every lane and the setup task run."""
        run: subprocess.CompletedProcess = run_airflow(env, "dags", "test", dag_id, timeout=300)
        return _states(db, dag_id)[-1], run.stdout + run.stderr

    env = env_without("dlt_watch")
    seed_metadata_db(env, cwd=REPO)
    done = run_airflow(env, "dags", "reserialize", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    # the watcher: its own connection id (never a configuration), on the asset keyed by the base id
    [(classpath, stored, uri)] = _query(
        db,
        "SELECT t.classpath, t.kwargs, a.uri FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id "
        "JOIN asset a ON a.id = w.asset_id",
    )
    assert classpath.endswith(".TopologyDueEventTrigger")
    kwargs = trigger_kwargs(home, stored)
    assert kwargs["kafka_conn_id"] == ROLES["watcher"], kwargs
    assert kafka_bootstrap not in json.dumps(kwargs)
    assert uri == f"kafka-retry-topology://kafka_default/{main}"

    # the DLT watch's connection missing: only watch_dlt fails, naming it
    states, output = dags_test(env)
    (tmp_path / "dags-test-1.txt").write_text(output)
    assert states == {
        "ensure_topics": "success",
        "retry_1": "success",
        "retry_2": "success",
        "watch_dlt": "failed",
    }, output[-5000:]
    assert f"The conn_id `{ROLES['dlt_watch']}` isn't defined" in output, output[-5000:]
    processed = ledger_file.read_text().split()
    assert sorted(processed) == sorted(
        rid for rid, (mode, _, _) in records.items() if mode == "ok" and not rid.startswith("later")
    )
    dead = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic))
    assert dead == sorted(rid for rid, (mode, _, _) in records.items() if mode == "fatal")

    # the tier runs' connection missing: only the tier tasks fail, naming it; the DLT watch reports
    states, output = dags_test(env_without("tiers"))
    (tmp_path / "dags-test-2.txt").write_text(output)
    assert states == {
        "ensure_topics": "success",
        "retry_1": "failed",
        "retry_2": "failed",
        "watch_dlt": "success",
    }, output[-5000:]
    assert f"The conn_id `{ROLES['tiers']}` isn't defined" in output, output[-5000:]
    notes = [json.loads(line) for line in notify_log.read_text().splitlines()]
    watched = [n for n in notes if n["task_id"] == "watch_dlt"]
    assert [n["summary"]["totals"]["new_records"] for n in watched] == [len(dead)]
