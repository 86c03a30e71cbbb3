"""
Least privilege through Airflow on the secured broker (issue 48): every role its own principal and its own
Airflow connection, with exactly the bindings ``topology acls`` prints for it (applied as the CLI applies
them, ``engine/kafka/acl_admin.py``), on SASL_SSL SCRAM-SHA-512 with ACLs enforced.

One real deployment (api-server, scheduler, dag-processor, triggerer; LocalExecutor on PostgreSQL) runs:

* the topology DAG (``build_retry_dags(conn_ids=...)``): the watcher in the triggerer finds the retry
  topics missing and starts ``ensure_topics`` (setup role), then fires the due lanes, and the tier tasks
  (tiers role) drain the main topic and every retry tier; a ledger shows every record ends exactly once
  (read_committed). The DLT watch's connection lacks one binding, its group READ: ``watch_dlt`` fails at
  once (its check before the scan), naming the principal, the group and the operation, commits nothing,
  and no other task fails. Once the binding
  is granted, a manual run's ``watch_dlt`` reports every dead letter;
* the replay DAG (replay role) moves the DLT's permanent failures back to the main topic, each once;
* the Retry tiers view (in-process, the api-server's ``[kafka_retry] kafka_conn_id``: the view role) shows
  the backlog and the dead letters.

No SCRAM password appears in ``ps``, the components' and the tasks' logs, XCom, the trigger rows
(decrypted) or the view's answers. The checks and the inputs go through the node's own listener as a super
user (``role_users.internal``), never through a role.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from airflow_kafka_retry.policy.client_names import watch_group
from airflow_kafka_retry.policy.headers.codec import BACKOFF_TIMESTAMP, encode_big_integer
from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster, airflow_env
from airflow_kafka_retry.sandbox.kafka_secure import ADMIN
from airflow_kafka_retry.sandbox.scratch_topics import create_topics

from tests.support import ledger
from tests.support.timed_stream import dlt_coordinates, json_column, watched_dead_letters
from tests.support.trigger_rows import trigger_kwargs

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 42
DRAIN_DEADLINE_S = 240  # liveness bounds on a loaded 2-core machine, not speed
RUN_DEADLINE_S = 180
SETUP_DEADLINE_S = 300  # the first parse, the watcher and ensure_topics, on a loaded machine
PERMANENT = f"{ledger.HANDLER_MODULE}.PermanentError"
CONNS = {role: f"akr_sec_{role}" for role in ("setup", "tiers", "dlt_watch", "watcher", "replay", "view")}
REPLAY_DAG = "akr_sec_replay"

DAG_FILE = '''
"""Written by tests/integration/test_secure_airflow.py."""
from airflow_kafka_retry import build_dlt_replay_dag, build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="{handler}:indexed",
    value_deserializer="{handler}:decode",
    include_main=True,
    on_dlt=[record_notification],
    dag_id_template="sec__{{topic}}",
    default_args={{"retries": 0}},
    conn_ids={conn_ids!r},
))
replay = build_dlt_replay_dag({topology!r}, dag_id={replay_dag!r}, kafka_conn_id={replay_conn!r})
'''


class AllowAll:
    """The view's auth manager: these checks are about what the view role reads, not who may see it."""

    def is_authorized_configuration(self, **_: object) -> bool:
        return True

    def is_authorized_dag(self, **_: object) -> bool:
        return True

    def batch_is_authorized_dag(self, requests: object, **_: object) -> bool:
        return True


def _secrets(role_users) -> set[str]:
    users = [*role_users.names.values(), ADMIN]
    return {role_users.kafka.client_config(u)["sasl.password"] for u in users}


def _leaks(secrets: set[str], texts: dict[str, str]) -> list[str]:
    return [where for where, text in texts.items() if any(s in text for s in secrets)]


def _ps_leaks(secrets: set[str]) -> list[str]:
    lines = subprocess.run(
        ["ps", "-eww", "-o", "pid=,args="], check=True, capture_output=True, text=True, timeout=30
    ).stdout.splitlines()
    return [line[:200] for line in lines if any(s in line for s in secrets)]


def _task_instances(cluster: AirflowCluster, dag_id: str) -> list[tuple]:
    return cluster.query(
        "SELECT run_id, task_id, state, start_date, end_date FROM task_instance WHERE dag_id = ?", dag_id
    )


def _task_log(cluster: AirflowCluster, dag_id: str, run_id: str, task_id: str) -> str:
    folder = cluster.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log")))


def _wait(what: str, done, cluster: AirflowCluster, secrets: set[str], timeout: float, seen_ps: list) -> None:
    """Wait for ``done()``, checking ``ps`` for a password (task processes come and go) meanwhile."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {timeout:.0f}s\nscheduler:\n{cluster.log_tail('scheduler', 3000)}\n"
                f"triggerer:\n{cluster.log_tail('triggerer', 3000)}"
            )
        cluster.check_alive()
        seen_ps.extend(_ps_leaks(secrets))
        time.sleep(1)


def _manual_run(cluster: AirflowCluster, dag_id: str, conf: dict | None = None) -> str:
    args = ["dags", "trigger", dag_id, "--output", "json"] + (["-c", json.dumps(conf)] if conf else [])
    done = cluster.cli(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = json.loads(done.stdout.strip().splitlines()[-1])  # after any warning Airflow prints
    return run["dag_run_id"]


def _finished(cluster: AirflowCluster, dag_id: str, run_id: str, task_id: str) -> str | None:
    rows = [r for r in _task_instances(cluster, dag_id) if r[0] == run_id and r[1] == task_id]
    return rows[0][2] if rows and rows[0][2] in ("success", "failed", "skipped", "upstream_failed") else None


def test_every_role_through_airflow_with_exactly_its_printed_acls(
    role_users, airflow_database_url, tmp_path, monkeypatch
):
    topology = ledger.make_topology("secair")
    topologies = tmp_path / "topologies"
    topologies.mkdir()
    topology_file = topologies / "secair.yaml"
    topology = ledger.write_topology(topology, topology_file)
    dlt, group = topology.dlt_topic, watch_group(topology.group_id)
    scope = AclScope(include_main=True)
    [missing] = [
        b
        for b in acl_bindings(topology, scope, roles=["dlt_watch"])
        if (b.resource_type, b.operation) == ("group", "READ")
    ]
    role_users.grant([b for b in acl_bindings(topology, scope) if b != missing])
    secrets = _secrets(role_users)
    seen_ps: list[str] = []
    create_topics(role_users.internal, [topology.topic], PARTITIONS)  # the service's; setup creates the rest

    home = tmp_path / "airflow"
    ledger_file, notify_log = tmp_path / "ledger.txt", tmp_path / "notified.jsonl"
    env = airflow_env(
        home,
        connections={
            conn: {"conn_type": "kafka", "extra": role_users.config(role)} for role, conn in CONNS.items()
        },  # and no kafka_default: a task that fell back to it would fail
        extra={"AKR_LEDGER": str(ledger_file), "AKR_NOTIFY_LOG": str(notify_log)},
        pythonpath=[REPO],
        database_url=airflow_database_url,
    )
    (home / "dags" / "akr_secure.py").write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(topology_file),
                handler=ledger.HANDLER_MODULE,
                conn_ids={r: CONNS[r] for r in ("setup", "tiers", "dlt_watch", "watcher")},
                replay_dag=REPLAY_DAG,
                replay_conn=CONNS["replay"],
            )
        )
    )
    dag_id = f"sec__{topology.topic}"
    with AirflowCluster(home, env, cwd=REPO, migrated=True, api_apps="execution") as cluster:
        # the watcher (watcher role) finds the retry topics missing: ensure_topics (setup role) creates them
        cluster.wait_for_success(dag_id, SETUP_DEADLINE_S, task_id="ensure_topics")
        inputs = ledger.produce_inputs(role_users.internal, topology, COUNT, PARTITIONS)
        dead = {rid for rid, (mode, _, _) in inputs.records.items() if mode in ledger.DLT_FATES}

        def drained() -> bool:
            handled = set(ledger.processed_ids(str(ledger_file))) if ledger_file.exists() else set()
            in_dlt = {m.key().decode() for m in ledger.read_all(role_users.internal, dlt)}
            failed_watch = [r for r in _task_instances(cluster, dag_id) if r[1:3] == ("watch_dlt", "failed")]
            return handled | in_dlt >= set(inputs.records) and bool(failed_watch)

        what = "every record at its end, a watch_dlt failed"
        _wait(what, drained, cluster, secrets, DRAIN_DEADLINE_S, seen_ps)
        # one ACL less: watch_dlt failed naming the principal, the group and the operation, committed nothing
        failed = [r for r in _task_instances(cluster, dag_id) if r[1:3] == ("watch_dlt", "failed")]
        for run_id, _, _, started, ended in failed:
            log = _task_log(cluster, dag_id, run_id, "watch_dlt")
            for named in (role_users.principals["dlt_watch"], f"READ on group '{missing.name}'"):
                assert named in log, f"{named!r} not in the failed watch_dlt's log:\n{log[-4000:]}"
            # refused by the check before the scan (10 s deadline), not after scan_timeout (120 s): a
            # liveness bound with room for a loaded machine (the task's own start-up included)
            assert (ended - started).total_seconds() < 60, "watch_dlt waited before failing"
        committed = ledger.committed(role_users.internal, group, dlt, PARTITIONS)
        assert all(offset < 0 for offset in committed.values()), committed

        # the binding granted: the next watch_dlt (dlt_watch role) reports every dead letter, once
        role_users.grant([missing])

        def watched() -> list[tuple[str, int, int]]:
            lines = notify_log.read_text().splitlines() if notify_log.exists() else []
            return watched_dead_letters([json.loads(line) for line in lines])

        reported = "the dead letters reported"
        _wait(reported, lambda: len(watched()) >= len(dead), cluster, secrets, RUN_DEADLINE_S, seen_ps)
        busy = ("running", "queued", "scheduled", "up_for_reschedule", "deferred", "restarting")
        _wait(
            "the runs done",
            lambda: not [r for r in _task_instances(cluster, dag_id) if r[2] in busy],
            cluster, secrets, RUN_DEADLINE_S, seen_ps,
        )  # fmt: skip
        # every record exactly once where its mode sends it, every tier group committed to its end
        ledger.check_ledger(role_users.internal, topology, inputs, str(ledger_file), PARTITIONS)
        on_dlt = dlt_coordinates(role_users.internal, dlt)
        assert watched() == on_dlt, "a dead letter not reported, or reported twice"
        committed = ledger.committed(role_users.internal, group, dlt, PARTITIONS)
        for _, partition, offset in on_dlt:  # past every dead letter (and the transactions' markers)
            assert committed[partition] > offset, committed
        instances = _task_instances(cluster, dag_id)
        assert {r[1] for r in instances if r[2] in ("failed", "upstream_failed")} == {"watch_dlt"}, instances
        assert {"ensure_topics", "main", "retry_1"} <= {r[1] for r in instances if r[2] == "success"}

        # the view (view role): a backlog on retry-1 (not due for an hour), the dead letters by exception
        view = _view(monkeypatch, role_users, topology, topologies)
        tiers = {t["topic"]: t["backlog"] for t in view["tiers"]}
        retry1 = topology.tier(1).topic
        assert all(b["error"] is None for b in tiers.values()), tiers
        assert tiers[retry1]["totals"]["backlog"] == 3, tiers
        assert [t for t, b in tiers.items() if t != retry1 and b["totals"]["backlog"]] == [], tiers
        [dlt_view] = [d for d in view["dead_letter_topics"] if d["topic"] == dlt]
        expected = Counter(ledger.DLT_FATES[inputs.records[rid][0]][1] for rid in dead)
        assert dlt_view["counts"]["by_exception"] == dict(expected), dlt_view

        # the replay DAG (replay role) moves the permanent failures back to the main topic, each once
        permanent = {rid for rid in dead if inputs.records[rid][0] == "permanent"}
        replay_run = _manual_run(cluster, REPLAY_DAG, {"exception": PERMANENT, "dry_run": False})
        _wait(
            "the replay run",
            lambda: _finished(cluster, REPLAY_DAG, replay_run, "replay_dlt"),
            cluster, secrets, RUN_DEADLINE_S, seen_ps,
        )  # fmt: skip
        replay_log = _task_log(cluster, REPLAY_DAG, replay_run, "replay_dlt")
        assert _finished(cluster, REPLAY_DAG, replay_run, "replay_dlt") == "success", replay_log[-4000:]
        [(summary,)] = cluster.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'replay_dlt' "
            "AND \"key\" = 'return_value'",
            REPLAY_DAG,
            replay_run,
        )
        assert json_column(summary)["moved"] == len(permanent), summary
        on_main = Counter(m.key().decode() for m in ledger.read_all(role_users.internal, topology.topic))
        assert {rid for rid, n in on_main.items() if n == 2} == permanent, on_main
        assert max(on_main.values()) == 2

        # no password anywhere Airflow shows or keeps
        seen_ps.extend(_ps_leaks(secrets))
        texts = {str(p.relative_to(home)): p.read_text(errors="replace") for p in home.rglob("*.log")}
        texts["view"] = json.dumps(view)
        for (value,) in cluster.query("SELECT value FROM xcom"):
            texts[f"xcom {str(value)[:80]}"] = json.dumps(json_column(value))
        for (stored,) in cluster.query("SELECT kwargs FROM trigger"):
            texts["trigger row"] = json.dumps(trigger_kwargs(home, stored))
        assert any(k.startswith("trigger") for k in texts), "no trigger row to check"
    assert seen_ps == [], seen_ps
    assert _leaks(secrets, texts) == []


def _view(monkeypatch, role_users, topology, topologies: Path) -> dict:
    """The plugin's topology endpoint in-process, reading Kafka with the view role's connection."""
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_kafka_retry.plugin import access as view_access, app as view_app

    producer = Producer({"bootstrap.servers": role_users.internal})
    later = encode_big_integer(int(time.time() * 1000) + 3_600_000)
    for i in range(3):
        producer.produce(
            topology.tier(1).topic, b"{}", key=f"view-{i}".encode(), partition=i % PARTITIONS,
            headers=[(BACKOFF_TIMESTAMP, later)],
        )  # fmt: skip
    assert producer.flush(15) == 0
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONNS['view'].upper()}",
        json.dumps({"conn_type": "kafka", "extra": role_users.config("view")}),
    )
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__KAFKA_CONN_ID", CONNS["view"])
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TOPOLOGIES", str(topologies / "*.yaml"))
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__DAG_ID_TEMPLATE", "sec__{topic}")
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TIMEOUT", "20")
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__CACHE_TTL", "0")
    monkeypatch.setattr(view_access, "_auth_manager", lambda: AllowAll())
    monkeypatch.setattr(view_access, "_team_names", lambda dag_ids: {})
    monkeypatch.setattr(view_app.runs, "last_runs", lambda *a, **k: [])  # the runs come from the DB
    app = view_app.create_app()
    app.dependency_overrides[get_user] = lambda: "someone"
    with TestClient(app) as client:
        [listed] = client.get("/api/topologies").json()["topologies"]
        answer = client.get(f"/api/topologies/{listed['id']}")
    assert answer.status_code == 200, answer.text
    return answer.json()
