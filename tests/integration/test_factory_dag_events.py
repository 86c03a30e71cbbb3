"""Event-mode DAGs of the factory through real Airflow: ``airflow dags test`` on SQLite, the embedded broker.

``dags test`` involves no watcher: the tier DAG's one task drains what is due when it runs. Checked:
a tier run before the topics exist is skipped; the ``@once`` setup DAG creates the missing topics; the tier
DAG drains the due records of retry-1, routes the failures and commits right before the not-yet-due ones; the
DLT-watch DAG reports the dead letters; the watchers' triggers are registered in the metadata DB with the
connection id only.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.engine.topics import topology_topics
from airflow_kafka_retry.policy.topology_file import load_topology
from airflow_kafka_retry.testing.airflow_stack import airflow_env, seed_metadata_db
from airflow_kafka_retry.testing.topics import create_topics, delete_topics, unique_topic

from tests.integration.test_factory_dag import (
    COUNT,
    HANDLER_MODULE,
    MODES,
    PARTITIONS,
    _produce_tier_records,
    _query,
    _states,
)
from tests.support import ledger
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]

DAG_FILE = '''
"""Written by tests/integration/test_factory_dag_events.py."""
from airflow_kafka_retry import build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.ledger_handler:indexed",
    value_deserializer="tests.support.ledger_handler:decode",
    on_dlt=[record_notification],
    dag_id_template="akr_{{topic}}",
    default_args={{"retries": 0}},
))
'''


def test_event_mode_dags_in_airflow_dags_test(kafka_bootstrap, tmp_path, request):
    main = unique_topic("edag")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {
                "topic": main,
                "group_id": f"{main}-svc",
                "attempts": 3,
                "backoff": {"kind": "custom", "delays": ["1s", "2h"]},
                "not_retryable": [f"{HANDLER_MODULE}.InvalidOrder"],
            }
        )
    )
    topology = load_topology(topology_file)
    retry1, retry2 = (t.topic for t in topology.retry_tiers)
    dlt = topology.dlt_topic
    create_topics(kafka_bootstrap, [main, retry1], PARTITIONS)  # the setup DAG creates the others
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    records = _produce_tier_records(kafka_bootstrap, retry1)
    ledger_file, notify_log = tmp_path / "ledger.txt", tmp_path / "notified.jsonl"
    home = tmp_path / "airflow"
    env = airflow_env(
        home,
        connections={
            "kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
        },
        extra={"AKR_LEDGER": str(ledger_file), "AKR_NOTIFY_LOG": str(notify_log)},
        pythonpath=[REPO],
    )
    (home / "dags" / "akr_events.py").write_text(
        textwrap.dedent(DAG_FILE.format(topology=str(topology_file)))
    )

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_airflow(env, *args, timeout=timeout)

    def dags_test(dag_id: str) -> str:
        run = cli("dags", "test", dag_id, timeout=300)
        return (run.stdout + run.stderr)[-5000:]

    seed_metadata_db(env, cwd=REPO)
    done = cli("dags", "reserialize", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    db = home / "airflow.db"

    # the watchers' triggers are registered with their kwargs: the connection id, never its configuration
    triggers = _query(
        db, "SELECT t.classpath, t.kwargs FROM trigger t JOIN asset_watcher w ON w.trigger_id = t.id"
    )
    assert sorted(c.rsplit(".", 1)[1] for c, _ in triggers) == [
        "DltArrivalEventTrigger",
        "TierDueEventTrigger",
        "TierDueEventTrigger",
    ], triggers
    assert not any(kafka_bootstrap in str(kwargs) for _, kwargs in triggers)

    # before the setup DAG ran, a run of a tier whose topic does not exist yet is skipped (nothing is due
    # there)
    tier2 = f"akr_{retry2}"
    output = dags_test(tier2)
    assert _states(db, tier2) == [{"reprocess": "skipped"}], output
    assert f"{retry2} does not exist yet" in output
    watch = f"akr_{dlt}"
    output = dags_test(watch)
    assert _states(db, watch) == [{"watch_dlt": "skipped"}], output

    setup = f"akr_{main}__ensure_topics"
    output = dags_test(setup)
    assert _states(db, setup) == [{"ensure_topics": "success"}], output
    [(ensured,)] = _query(db, "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'ensure_topics'", setup)
    assert json.loads(ensured)["created"] == [retry2, dlt, topology.parking_topic]
    assert set(Producer({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics) >= {
        retry2,
        dlt,
        topology.parking_topic,
    }

    tier1 = f"akr_{retry1}"
    output = dags_test(tier1)
    assert _states(db, tier1) == [{"reprocess": "success"}], output
    processed = ledger_file.read_text().split()
    assert sorted(processed) == sorted(
        rid for rid, (mode, _, _) in records.items() if mode == "ok" and not rid.startswith("later")
    )
    moved = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, retry2))
    assert moved == sorted(
        rid for rid, (mode, _, _) in records.items() if mode in ("transient:2", "permanent")
    )
    dead = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, dlt))
    assert dead == sorted(rid for rid, (mode, _, _) in records.items() if mode == "fatal")
    later = {p: offset for rid, (_, p, offset) in records.items() if rid.startswith("later")}
    assert (
        ledger.committed(kafka_bootstrap, topology.consumer_group(topology.tier(1)), retry1, PARTITIONS)
        == later
    )

    output = dags_test(watch)
    assert _states(db, watch)[-1] == {"watch_dlt": "success"}, output
    notes = [json.loads(line) for line in notify_log.read_text().splitlines()]
    watched = [n for n in notes if n["task_id"] == "watch_dlt"]
    assert [n["summary"]["totals"]["new_records"] for n in watched] == [len(dead)]
    assert len(dead) == sum(1 for i in range(COUNT) if MODES[i % len(MODES)] == "fatal")
