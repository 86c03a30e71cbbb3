"""
A DLT's page in the Retry tiers view: who may do what (endpoints in-process, a fake auth manager, no
broker), and its view-model pieces (the redrive's conf, the page's meta, a record's row, the audit's users).

The flow through a real API server, Kafka and chromium is tests/integration/test_view_page.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from fastapi.testclient import TestClient

from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.summary import ReplaySummary
from airflow_kafka_retry.engine.kafka.deadlines import CallStuckError
from airflow_kafka_retry.factory.replay_dag import offered_targets, replay_params
from airflow_kafka_retry.plugin import access as view_access, app as view_app, dlt_page, redrive_api, scans
from airflow_kafka_retry.plugin.access import DagAccess
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.topology.model import Topology

REPLAY_DAG = "kafka_dlt_replay__orders"


class Manager:
    """Reads every DAG but ``unreadable``; triggers ``triggerable``; reads runs of all but ``no_runs``."""

    def __init__(self) -> None:
        self.unreadable: set[str] = set()
        self.triggerable: set[str] = set()
        self.no_runs: set[str] = set()

    def is_authorized_configuration(self, *, method, user, details=None) -> bool:
        return method == "GET"

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if details is None:
            return method == "GET"
        if details.id in self.unreadable:
            return False
        if method == "POST":
            return details.id in self.triggerable
        return not (access_entity is not None and access_entity.name == "RUN" and details.id in self.no_runs)

    def batch_is_authorized_dag(self, requests, *, user) -> bool:
        return all(self.is_authorized_dag(user=user, **r) for r in requests)


class User:
    def get_name(self) -> str:
        return "ops-alice"


@pytest.fixture
def client(monkeypatch, tmp_path):
    from airflow.api_fastapi.core_api.security import get_user

    app = view_app.create_app()
    app.dependency_overrides[get_user] = User
    manager = Manager()
    monkeypatch.setattr(view_access, "_auth_manager", lambda: manager)
    monkeypatch.setattr(view_access, "_team_names", lambda dag_ids: {})
    monkeypatch.setattr(redrive_api, "replay_dag_targets", lambda dag_id: ["main", "first-tier", "orders"])
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TOPOLOGIES", str(tmp_path / "*.yaml"))
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__LAYOUT", "tiers")
    (tmp_path / "orders.yaml").write_text("topic: orders\ngroup_id: svc\nattempts: 2\n")
    with TestClient(app) as test_client:
        test_client.manager = manager  # type: ignore[attr-defined]
        [item] = test_client.get("/api/topologies").json()["topologies"]
        test_client.base = f"/api/topologies/{item['id']}/dead-letters"  # type: ignore[attr-defined]
        yield test_client


def test_who_may_not_trigger_the_replay_dag_gets_403_from_dry_run_and_stop(client):
    for response in (
        client.post(f"{client.base}/orders-dlt/dry-run", json={}),
        client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop"),
    ):
        assert response.status_code == 403, response.text
        assert REPLAY_DAG in response.json()["detail"]
        assert "trigger" in response.json()["detail"]


def test_who_may_not_read_the_replay_dags_runs_gets_403_from_the_replays(client):
    client.manager.no_runs.add(REPLAY_DAG)
    response = client.get(f"{client.base}/orders-dlt/replays")
    assert response.status_code == 403
    assert "read the runs of" in response.json()["detail"]


def test_a_hidden_topology_and_a_topic_not_its_dead_letters_answer_404(client):
    client.manager.triggerable.add(REPLAY_DAG)
    for topic in ("orders", "orders-retry-1", "payments-dlt"):  # its main topic, a tier, someone else's
        assert client.post(f"{client.base}/{topic}/dry-run", json={}).status_code == 404
    client.manager.unreadable.add("kafka_retry__orders-retry-1")
    for response in (
        client.get(f"{client.base}/orders-dlt"),
        client.post(f"{client.base}/orders-dlt/dry-run", json={}),
        client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop"),
        client.get(f"{client.base}/orders-dlt/replays"),
    ):
        assert response.status_code == 404, response.text


def test_bad_input_is_a_400_naming_the_field_before_kafka_is_read(client, monkeypatch):
    client.manager.triggerable.add(REPLAY_DAG)
    monkeypatch.setattr(redrive_api, "kafka_config", lambda *args: pytest.fail("Kafka was reached"))
    unknown = client.post(f"{client.base}/orders-dlt/dry-run", json={"key": "k1"})
    assert unknown.status_code == 400
    assert "unknown field(s) key" in unknown.json()["detail"]
    since = client.get(f"{client.base}/orders-dlt", params={"since": "yesterday-ish"})
    assert since.status_code == 400
    assert "'yesterday-ish' is not a time" in since.json()["detail"]
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID", "kafka_replay")
    bad_id = client.post(f"{client.base}/orders-dlt/replays/not%20an%20id/stop")
    assert bad_id.status_code == 400
    assert "--replay-id" in bad_id.json()["detail"]


def test_a_dry_run_needs_the_replay_dag_in_airflow(client, monkeypatch):
    client.manager.triggerable.add(REPLAY_DAG)
    monkeypatch.setattr(redrive_api, "replay_dag_targets", lambda dag_id: None)
    response = client.post(f"{client.base}/orders-dlt/dry-run", json={})
    assert response.status_code == 409
    assert response.json()["detail"] == f"the replay DAG {REPLAY_DAG} is not in Airflow"


def test_stop_names_the_airflow_user_and_a_replay_not_running_is_a_409(client, monkeypatch):
    client.manager.triggerable.add(REPLAY_DAG)
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID", "kafka_replay")
    monkeypatch.setattr(redrive_api, "kafka_config", lambda settings, conn_id: {})
    asked: list[tuple] = []

    def stop(config, topology, topic, replay_id, *, user):
        asked.append((topic, replay_id, user))
        if replay_id == "redrive-done":
            raise ReplayError("--replay-id redrive-done: not running (its status says done); nothing to stop")
        return {"replay_id": replay_id, "state": "running"}

    monkeypatch.setattr(redrive_api.dlt_reads, "stop", stop)
    assert client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop").json()["state"] == "running"
    ended = client.post(f"{client.base}/orders-dlt/replays/redrive-done/stop")
    assert ended.status_code == 409
    assert "not running" in ended.json()["detail"]
    assert asked == [("orders-dlt", "redrive-1", "ops-alice"), ("orders-dlt", "redrive-done", "ops-alice")]


def test_without_the_redrive_connection_stop_is_a_409_naming_the_option(client, monkeypatch):
    """The view's own principal only reads: no Stop unless [kafka_retry] redrive_kafka_conn_id is set."""
    monkeypatch.setattr(redrive_api, "kafka_config", lambda *args: pytest.fail("Kafka was reached"))
    denied = client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop")
    assert denied.status_code == 403, "who may not trigger the replay DAG hears nothing more"
    client.manager.triggerable.add(REPLAY_DAG)
    response = client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop")
    assert response.status_code == 409, response.text
    assert "[kafka_retry] redrive_kafka_conn_id" in response.json()["detail"]
    assert "dlt replay-stop" in response.json()["detail"]


def test_stop_writes_with_the_redrive_connection_never_the_views_nor_its_secret(client, monkeypatch, caplog):
    """Set, Stop writes as the replay role's principal, for who may trigger; the secret is never said."""
    view_secret, replay_secret = "view-secret-1f3a", "replay-secret-9c2e"
    for conn_id, secret in (("kafka_default", view_secret), ("kafka_replay", replay_secret)):
        extra = {"bootstrap.servers": "127.0.0.1:9", "sasl.username": conn_id, "sasl.password": secret}
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra})
        )
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID", "kafka_replay")
    used: list[dict] = []

    def stop(config, topology, topic, replay_id, *, user):
        used.append(config)
        return {"replay_id": replay_id, "state": "running"}

    monkeypatch.setattr(redrive_api.dlt_reads, "stop", stop)
    assert client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop").status_code == 403
    assert used == []
    client.manager.triggerable.add(REPLAY_DAG)
    with caplog.at_level(logging.DEBUG):
        response = client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop")
        assert response.status_code == 200, response.text
        [config] = used
        assert (config["sasl.username"], config["sasl.password"]) == ("kafka_replay", replay_secret)
        # a connection that cannot be read is named, never shown
        monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID", "kafka_missing")
        missing = client.post(f"{client.base}/orders-dlt/replays/redrive-1/stop")
    assert missing.status_code == 502
    assert "connection 'kafka_missing'" in missing.json()["detail"]
    said = response.text + missing.text + caplog.text
    assert replay_secret not in said
    assert view_secret not in said


def test_the_page_offers_stop_only_with_the_redrive_connection(client, monkeypatch):
    client.manager.triggerable.add(REPLAY_DAG)
    monkeypatch.setattr(redrive_api, "kafka_config", lambda *args: {})
    monkeypatch.setattr(redrive_api.dlt_reads, "list_records", lambda *args, **kwargs: {"records": []})
    meta = client.get(f"{client.base}/orders-dlt").json()
    assert (meta["can_redrive"], meta["can_stop"]) == (True, False)
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID", "kafka_replay")
    meta = client.get(f"{client.base}/orders-dlt").json()
    assert (meta["can_redrive"], meta["can_stop"]) == (True, True)


def test_redrive_rights_are_the_replay_dags_trigger_and_read_permissions():
    manager = Manager()
    rights = redrive_api.redrive_rights(
        DagAccess("u", [REPLAY_DAG], auth_manager=manager, team_names=lambda ids: {}), REPLAY_DAG
    )
    assert rights == redrive_api.RedriveRights(redrive=False, audit=True)
    manager.triggerable.add(REPLAY_DAG)
    manager.no_runs.add(REPLAY_DAG)
    rights = redrive_api.redrive_rights(
        DagAccess("u", [REPLAY_DAG], auth_manager=manager, team_names=lambda ids: {}), REPLAY_DAG
    )
    assert rights == redrive_api.RedriveRights(redrive=True, audit=False)


def _topology() -> Topology:
    return Topology.from_mapping({"topic": "orders", "group_id": "svc", "attempts": 3}, source="orders.yaml")


def test_page_meta_offers_the_dags_targets_only_to_who_may_redrive():
    topology = _topology()
    targets = ["main", "first-tier", "orders", "orders-retry-1", "audit"]
    meta = dlt_page.page_meta(
        topology,
        "orders-dlt",
        replay_dag_id=REPLAY_DAG,
        targets=targets,
        can_redrive=True,
        can_audit=True,
        can_stop=True,
    )
    assert (meta["kind"], meta["can_redrive"], meta["targets"]) == ("dlt", True, targets)
    assert meta["can_stop"]
    viewer = dlt_page.page_meta(
        topology,
        "orders-dlt",
        replay_dag_id=REPLAY_DAG,
        targets=targets,
        can_redrive=False,
        can_audit=True,
        can_stop=True,
    )
    assert (viewer["can_redrive"], viewer["can_stop"], viewer["targets"]) == (False, False, [])
    missing = dlt_page.page_meta(
        topology,
        "orders-parking",
        replay_dag_id=REPLAY_DAG,
        targets=None,
        can_redrive=True,
        can_audit=True,
        can_stop=True,
    )
    assert (missing["kind"], missing["replay_dag_found"], missing["can_redrive"]) == ("parking", False, False)


def test_the_dags_targets_are_read_from_its_to_param():
    params = replay_params(_topology(), allowed_targets=["audit"])
    assert offered_targets(params["to"].schema) == [
        "main",
        "first-tier",
        "orders",
        "orders-retry-1",
        "orders-retry-2",
        "audit",
    ]
    assert offered_targets({}) == []


def _summary(filters: dict, *, to: str | None = None) -> ReplaySummary:
    base = {
        "exception": [],
        "original_topic": [],
        "since_ms": None,
        "until_ms": None,
        "key": [],
        "partition": [],
    }
    return ReplaySummary(
        "r",
        "orders.yaml",
        "orders-dlt",
        "orders-dlt-replay-log",
        True,
        {**base, "offsets": None, "limit": None, **filters},
        to,
        None,
        started_ms=1_000_000,
    )


def test_the_redrive_conf_moves_what_the_dry_run_listed():
    # no until: the dry run's start, so records that fail later are left for the next redrive
    assert dlt_page.redrive_conf(_summary({})) == {"dlt": "orders-dlt", "until": "1000000"}
    conf = dlt_page.redrive_conf(
        _summary(
            {
                "exception": ["a.B", "c.D"],
                "original_topic": ["orders"],
                "since_ms": 400_000,  # "2h ago" as the dry run resolved it: a fixed time
                "until_ms": 2_000_000,  # later than the dry run: capped at its start
                "partition": [0, 2],
                "offsets": [5, None],
                "limit": 10,
            },
            to="main",
        )
    )
    assert conf == {
        "dlt": "orders-dlt",
        "exception": "a.B,c.D",
        "original_topic": "orders",
        "since": "400000",
        "until": "1000000",
        "partition": "0,2",
        "offsets": "5-",
        "limit": 10,
        "to": "main",
    }
    assert dlt_page.redrive_conf(_summary({"until_ms": 5, "offsets": [3, 3]}))["until"] == "5"
    assert dlt_page.redrive_conf(_summary({"offsets": [3, 3]}))["offsets"] == "3-3"


def test_a_dry_run_answer_counts_and_lists_coordinates_only():
    from airflow_kafka_retry.dlt.summary import Move

    summary = _summary({})
    summary.selected, summary.moved_before, summary.matched = 3, 1, 4
    summary.add_move(Move(0, 7, "orders", 0), None)
    summary.add_move(Move(1, 9, "orders", None, by_key=True), None)
    answer = dlt_page.dry_run_answer(summary)
    assert answer["would_move"] == 2
    assert answer["targets"] == {"orders": 2}
    assert [(m["partition"], m["offset"], m["target"], m["target_partition"]) for m in answer["moves"]] == [
        (0, 7, "orders", 0),
        (1, 9, "orders", None),
    ]
    assert answer["conf"] == {"dlt": "orders-dlt", "until": "1000000"}


def test_a_record_row_has_coordinates_age_family_and_failure_never_key_or_value():
    record = DltRecord(
        "orders-dlt",
        1,
        42,
        10_000,
        b"secret-key",
        b"secret-value",
        (("kafka_exception-fqcn", b"myapp.errors.Timeout"), ("kafka_original-topic", b"orders")),
    )
    row = dlt_page.record_row(record, now_ms=70_000)
    assert (row["partition"], row["offset"], row["age_s"]) == (1, 42, 60.0)
    assert (row["exception"], row["family"], row["original_topic"]) == (
        "myapp.errors.Timeout",
        "spring-retry-topic",
        "orders",
    )
    assert "secret" not in repr(row)


def test_the_audit_names_who_triggered_each_replay_dag_run():
    asked: list[tuple] = []

    def users(dag_id, run_ids):
        asked.append((dag_id, run_ids))
        return {"manual__1": "ops-alice"}

    statuses = [
        {"replay_id": "a", "started_by": {"airflow": {"dag_id": REPLAY_DAG, "run_id": "manual__1"}}},
        {"replay_id": "b", "started_by": {"user": "bob", "airflow": None}},  # the command line
        {"replay_id": "c", "started_by": {"airflow": {"dag_id": "another_dag", "run_id": "manual__1"}}},
    ]
    shown = dlt_page.with_triggering_users(statuses, REPLAY_DAG, users)
    assert [s["triggered_by"] for s in shown] == ["ops-alice", None, None]
    assert asked == [(REPLAY_DAG, ["manual__1"])]
    assert dlt_page.with_triggering_users(statuses[1:2], REPLAY_DAG, users)[0]["triggered_by"] is None
    assert len(asked) == 1, "no Airflow query without a run of the replay DAG"


def _settings(max_scans: int) -> ViewSettings:
    return ViewSettings(
        topologies=(),
        kafka_conn_id="k",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=0.2,
        runs=1,
        max_scans=max_scans,
    )


def test_run_capped_answers_busy_and_keeps_an_overrunning_works_slot_until_it_ends():
    settings = _settings(max_scans=7)  # a cap of its own (one per size, per process)
    release = threading.Event()
    with pytest.raises(CallStuckError, match="slow work did not end within 0.1s"):
        scans.run_capped(settings, 0.1, "slow work", release.wait)
    for _ in range(6):
        threading.Thread(
            target=scans.run_capped, args=(settings, 5, "slow", release.wait), daemon=True
        ).start()
    time.sleep(0.2)
    with pytest.raises(scans.ScanBusy, match="7 Kafka scans running"):
        scans.run_capped(settings, 1, "one more", lambda: 1)
    release.set()
    time.sleep(0.2)
    assert scans.run_capped(settings, 1, "one more", lambda: 1) == 1
