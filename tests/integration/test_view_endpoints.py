"""The view's JSON endpoints in-process (FastAPI TestClient) on the embedded broker, and with the broker down.

Authentication is Airflow's: here the user dependency is overridden and the auth manager is a fake
answering per DAG id (and recording the team each check names), so these tests are about what the
endpoints read, return and withhold; the API-server test (test_view_page.py) runs them behind
Airflow's real authentication and a real auth manager.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from airflow_kafka_retry.plugin import access as view_access, app as view_app, scans as view_scans
from airflow_kafka_retry.policy.headers.codec import BACKOFF_TIMESTAMP, encode_big_integer
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

pytestmark = pytest.mark.integration

SECRET = "view-s3cr3t-password"
PAYLOAD = b'{"card": "4111-1111-1111-1111"}'  # a dead letter's value: never shown


class FakeAuthManager:
    """Reads every DAG but ``unreadable``; triggers only ``allowed``; XComs of all but ``no_xcom``."""

    def __init__(self) -> None:
        self.allowed: set[str] = set()
        self.unreadable: set[str] = set()
        self.no_xcom: set[str] = set()
        self.read_all = True
        self.admin = False
        self.teams: dict[str, str | None] = {}

    def is_authorized_configuration(self, *, method, user, details=None) -> bool:
        return self.admin or method == "GET"

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        assert user == "someone"
        if details is None:
            return method == "GET" and self.read_all
        self.teams[details.id] = details.team_name
        if details.id in self.unreadable:
            return False
        if access_entity is not None and access_entity.name == "XCOM" and details.id in self.no_xcom:
            return False
        return method == "GET" or details.id in self.allowed

    def batch_is_authorized_dag(self, requests, *, user) -> bool:
        return all(
            self.is_authorized_dag(
                method=r["method"], user=user, access_entity=r.get("access_entity"), details=r.get("details")
            )
            for r in requests
        )


def fake_last_runs(
    dag_id: str, limit: int, task_id: str | None = None, *, summaries: bool = True
) -> list[dict]:
    summary = {"totals": {"drained": 3}} if summaries else None
    return [{"run_id": f"{dag_id}-r1", "state": "success", "summary": summary}]


@pytest.fixture
def client(monkeypatch, tmp_path):
    from airflow.api_fastapi.core_api.security import get_user

    app = view_app.create_app()
    app.dependency_overrides[get_user] = lambda: "someone"
    manager = FakeAuthManager()
    monkeypatch.setattr(view_access, "_auth_manager", lambda: manager)
    monkeypatch.setattr(
        view_access, "_team_names", lambda dag_ids: {d: "team-a" for d in dag_ids if "orders" in d}
    )
    monkeypatch.setattr(view_app.runs, "last_runs", fake_last_runs)
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TOPOLOGIES", str(tmp_path / "topologies" / "*.yaml"))
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TIMEOUT", "3")
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__CACHE_TTL", "0")
    # a DAG per tier; test_view_model.py covers the default, one DAG per topology
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__LAYOUT", "tiers")
    (tmp_path / "topologies").mkdir()
    with TestClient(app) as test_client:
        test_client.manager = manager  # type: ignore[attr-defined]
        test_client.allowed = manager.allowed  # type: ignore[attr-defined]
        test_client.topologies = tmp_path / "topologies"  # type: ignore[attr-defined]
        yield test_client


def use_broker(monkeypatch, bootstrap: str) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, "sasl.password": SECRET}}
        ),
    )


def test_topology_view_counts_what_is_on_the_broker(client, monkeypatch, kafka_bootstrap):
    name = unique_topic("viewapi")
    (client.topologies / "orders.yaml").write_text(
        f"topic: {name}\ngroup_id: svc\nattempts: 3\nbackoff: {{kind: fixed, delay: 30s}}\n"
    )
    (client.topologies / "broken.yaml").write_text("topic: x\n")
    topics = [name, f"{name}-retry-1", f"{name}-retry-2", f"{name}-dlt"]
    create_topics(kafka_bootstrap, topics, 2)
    try:
        use_broker(monkeypatch, kafka_bootstrap)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        now = int(time.time() * 1000)
        for i in range(5):
            producer.produce(
                f"{name}-retry-1",
                b"{}",
                partition=i % 2,
                headers=[(BACKOFF_TIMESTAMP, encode_big_integer(now - 1000 if i < 3 else now + 600_000))],
            )
        producer.produce(
            f"{name}-dlt", b"{}", partition=0, headers=[("kafka_exception-fqcn", b"myapp.Invalid")]
        )
        # a Kafka Connect sink's dead letter (DeadLetterQueueReporter's context headers): another family
        connect = [
            ("__connect.errors.topic", b"invoices"),
            ("__connect.errors.partition", b"2"),
            ("__connect.errors.offset", b"41"),
            ("__connect.errors.connector.name", b"invoices-sink"),
            ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
            ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ]
        producer.produce(f"{name}-dlt", PAYLOAD, partition=1, headers=connect)
        assert producer.flush(15) == 0
        client.allowed.add(f"kafka_retry__{name}-retry-1")

        listing = client.get("/api/topologies").json()["topologies"]
        by_source = {item["source"]: item for item in listing}
        assert by_source["orders.yaml"]["topic"] == name
        assert "group_id" in by_source["broken.yaml"]["error"], "a broken file is listed with its error"

        view = client.get(f"/api/topologies/{by_source['orders.yaml']['id']}").json()
    finally:
        delete_topics(kafka_bootstrap, topics)
    tiers = {t["topic"]: t for t in view["tiers"]}
    assert list(tiers) == [name, f"{name}-retry-1", f"{name}-retry-2"]
    tier1 = tiers[f"{name}-retry-1"]
    assert tier1["backlog"]["error"] is None
    assert tier1["backlog"]["totals"]["backlog"] == 5
    assert tier1["backlog"]["totals"]["due"]["now"] == 3
    assert tier1["backlog"]["totals"]["due"]["hour"] == 2
    assert tier1["dag_id"] == f"kafka_retry__{name}-retry-1"
    assert tier1["can_trigger"] is True
    assert tiers[f"{name}-retry-2"]["can_trigger"] is False
    assert tier1["runs"][0]["run_id"] == f"kafka_retry__{name}-retry-1-r1"
    dlt, parking = view["dead_letter_topics"]
    assert dlt["topic"] == f"{name}-dlt"
    assert dlt["counts"]["by_exception"] == {
        "myapp.Invalid": 1,
        "org.apache.kafka.connect.errors.DataException": 1,
    }
    assert dlt["counts"]["by_family"] == {"spring-retry-topic": 1, "kafka-connect": 1}
    samples = {s["family"]: s for s in dlt["counts"]["samples"]}
    connect_sample = samples["kafka-connect"]
    assert (connect_sample["partition"], connect_sample["offset"]) == (1, 0)
    assert (
        connect_sample["original_topic"],
        connect_sample["original_partition"],
        connect_sample["original_offset"],
    ) == ("invoices", 2, 41)
    assert (connect_sample["connector"], connect_sample["failure_message"]) == (
        "invoices-sink",
        "Converting byte[] to Kafka Connect data failed",
    )
    assert "delivery_count" in connect_sample["missing"]
    assert "original_topic" in samples["spring-retry-topic"]["missing"]  # only an exception header
    assert dlt["replay_dag_id"] == parking["replay_dag_id"] == f"kafka_dlt_replay__{name}"
    assert (parking["topic"], parking["kind"]) == (f"{name}-parking", "parking")
    assert (
        parking["counts"]["error"] == f"{name}-parking: topic(s) {name}-parking do not exist on the cluster; "
        "create the topology's topics first (airflow-kafka-retry topology create-topics FILE)"
    )
    body = json.dumps(view)
    assert SECRET not in body, "no Kafka configuration reaches the browser"
    assert kafka_bootstrap not in body, "no Kafka configuration reaches the browser"
    assert PAYLOAD.decode() not in body, "no record payload reaches the browser"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)  # the view must answer with errors, not hang, while the broker is down
def test_an_unreachable_broker_is_named_per_topic_and_does_not_hang(client, monkeypatch):
    (client.topologies / "orders.yaml").write_text("topic: orders\ngroup_id: svc\nattempts: 2\n")
    use_broker(monkeypatch, f"127.0.0.1:{_closed_port()}")
    [item] = client.get("/api/topologies").json()["topologies"]
    view = client.get(f"/api/topologies/{item['id']}").json()
    errors = {t["topic"]: t["backlog"]["error"] for t in view["tiers"]}
    assert set(errors) == {"orders", "orders-retry-1"}
    for topic, error in errors.items():
        assert error, error
        assert error.startswith(f"{topic}: "), error
    assert view["dead_letter_topics"][0]["counts"]["error"].startswith("orders-dlt: ")


def test_missing_connection_and_unknown_topology(client, monkeypatch):
    (client.topologies / "orders.yaml").write_text("topic: orders\ngroup_id: svc\n")
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__KAFKA_CONN_ID", "no_such_kafka")
    [item] = client.get("/api/topologies").json()["topologies"]
    view = client.get(f"/api/topologies/{item['id']}").json()
    assert view["error"].startswith("connection 'no_such_kafka': ")
    missing = client.get("/api/topologies/nope-123456")
    assert missing.status_code == 404
    assert "no topology 'nope-123456'" in missing.json()["detail"]


def test_the_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200
    assert "<title>Retry tiers</title>" in page.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../plugin.py").status_code == 404


def test_topologies_are_shown_only_to_users_who_may_read_their_tier_dags(client):
    (client.topologies / "orders.yaml").write_text("topic: orders\ngroup_id: svc\nattempts: 2\n")
    (client.topologies / "payments.yaml").write_text("topic: payments\ngroup_id: svc\nattempts: 3\n")
    (client.topologies / "broken.yaml").write_text("topic: x\n")
    # one unreadable tier DAG hides payments; a user who may not read every DAG does not see the broken file
    client.manager.unreadable.add("kafka_retry__payments-retry-1")
    client.manager.read_all = False

    listing = client.get("/api/topologies")
    assert listing.status_code == 200
    assert [t["topic"] for t in listing.json()["topologies"]] == ["orders"]
    ids = {path.name: view_app.view_model.topology_id(str(path)) for path in client.topologies.iterdir()}
    for name in ("payments.yaml", "broken.yaml"):
        denied = client.get(f"/api/topologies/{ids[name]}")
        assert denied.status_code == 404, denied.text  # as if it did not exist: ids cannot be probed
        assert denied.json() == {"detail": f"no topology {ids[name]!r} that you may read"}
    # each check named the DAG's team, as Airflow's own requires_access_dag does
    assert client.manager.teams["kafka_retry__orders-retry-1"] == "team-a"
    assert client.manager.teams["kafka_retry__payments-retry-1"] is None

    client.manager.read_all = True
    assert {t["source"] for t in client.get("/api/topologies").json()["topologies"]} == {
        "orders.yaml",
        "broken.yaml",
    }
    assert "group_id" in client.get(f"/api/topologies/{ids['broken.yaml']}").json()["error"]


def test_run_summaries_need_xcom_read_access(client, monkeypatch, kafka_bootstrap):
    use_broker(monkeypatch, kafka_bootstrap)
    (client.topologies / "orders.yaml").write_text("topic: orders-xcom\ngroup_id: svc\nattempts: 2\n")
    client.manager.no_xcom.add("kafka_retry__orders-xcom-retry-1")
    [item] = client.get("/api/topologies").json()["topologies"]
    tiers = {t["topic"]: t for t in client.get(f"/api/topologies/{item['id']}").json()["tiers"]}
    assert tiers["orders-xcom"]["runs"][0]["summary"] == {"totals": {"drained": 3}}
    [run] = tiers["orders-xcom-retry-1"]["runs"]
    assert run["state"] == "success", "the run is listed, its XCom summary is not"
    assert run["summary"] is None, "the run is listed, its XCom summary is not"


class CountingScans:
    """The real Kafka scans, counted per topic; each waits (up to a second) for ``cap + 1`` to run at once."""

    def __init__(self, monkeypatch, cap: int) -> None:
        self.calls: dict[str, int] = {}
        self.running = self.most = 0
        self.cap = cap
        self._cond = threading.Condition()
        for name in ("scan_backlog", "count_dead_letters"):
            monkeypatch.setattr(view_scans, name, self._wrap(getattr(view_scans, name)))

    def _wrap(self, scan):
        def counted(config, topic, *args, **kwargs):
            with self._cond:
                self.calls[topic] = self.calls.get(topic, 0) + 1
                self.running += 1
                self.most = max(self.most, self.running)
                self._cond.notify_all()
                # without a cap, the other scans start meanwhile and this sees more than ``cap`` at once
                self._cond.wait_for(lambda: self.running > self.cap, timeout=1)
            try:
                return scan(config, topic, *args, **kwargs)
            finally:
                with self._cond:
                    self.running -= 1

        return counted


def test_refreshes_within_the_cache_ttl_read_the_broker_once(client, monkeypatch, kafka_bootstrap):
    name = unique_topic("viewcache")
    (client.topologies / "orders.yaml").write_text(f"topic: {name}\ngroup_id: svc\nattempts: 2\n")
    create_topics(kafka_bootstrap, [name, f"{name}-retry-1", f"{name}-dlt"], 1)
    try:
        use_broker(monkeypatch, kafka_bootstrap)
        counting = CountingScans(monkeypatch, cap=100)
        monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__CACHE_TTL", "600")
        [item] = client.get("/api/topologies").json()["topologies"]
        first, second = (client.get(f"/api/topologies/{item['id']}").json() for _ in range(2))
        assert counting.calls == {name: 1, f"{name}-retry-1": 1, f"{name}-dlt": 1, f"{name}-parking": 1}
        assert first == second
        assert first["tiers"][0]["backlog"]["error"] is None
        # a TTL of 0 reads the broker on every refresh
        monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__CACHE_TTL", "0")
        client.get(f"/api/topologies/{item['id']}")
        assert counting.calls[name] == 2
    finally:
        delete_topics(kafka_bootstrap, [name, f"{name}-retry-1", f"{name}-dlt"])


def test_concurrent_requests_never_run_more_scans_than_the_cap(client, monkeypatch, kafka_bootstrap):
    names = [unique_topic(f"viewcap{i}") for i in range(3)]
    topics = [t for n in names for t in (n, f"{n}-retry-1", f"{n}-dlt")]
    for i, name in enumerate(names):
        (client.topologies / f"t{i}.yaml").write_text(f"topic: {name}\ngroup_id: svc\nattempts: 2\n")
    create_topics(kafka_bootstrap, topics, 1)
    try:
        use_broker(monkeypatch, kafka_bootstrap)
        monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__MAX_SCANS", "2")
        monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TIMEOUT", "60")  # time enough to wait for a turn
        counting = CountingScans(monkeypatch, cap=2)
        ids = [item["id"] for item in client.get("/api/topologies").json()["topologies"]]
        with ThreadPoolExecutor(max_workers=6) as pool:
            views = list(pool.map(lambda ident: client.get(f"/api/topologies/{ident}").json(), ids * 2))
    finally:
        delete_topics(kafka_bootstrap, topics)
    assert sum(counting.calls.values()) >= 4 * len(names), counting.calls
    assert counting.most == 2, f"{counting.most} Kafka scans ran at once; the cap is 2"
    complete = 0
    for view in views:  # a refresh while the same topology is being read answers busy at once
        errors = [t["backlog"]["error"] for t in view["tiers"]] + [
            view["dead_letter_topics"][0]["counts"]["error"]
        ]
        assert errors == [None, None, None] or all("busy" in e for e in errors), view
        complete += errors == [None, None, None]
    assert complete >= len(names), views


def test_a_hidden_and_a_missing_topology_answer_alike_and_patterns_are_for_admins(client):
    (client.topologies / "payments.yaml").write_text("topic: payments\ngroup_id: svc\nattempts: 3\n")
    client.manager.unreadable.add("kafka_retry__payments-retry-1")
    client.manager.read_all = False
    hidden = view_app.view_model.topology_id(str(client.topologies / "payments.yaml"))
    missing = hidden[:-4] + ("0000" if not hidden.endswith("0000") else "1111")
    answers = [client.get(f"/api/topologies/{ident}") for ident in (hidden, missing)]
    shapes = [
        (a.status_code, a.json()["detail"].replace(ident, "ID"))
        for a, ident in zip(answers, (hidden, missing))
    ]
    assert shapes[0] == shapes[1], shapes
    assert answers[0].status_code == 404
    assert str(client.topologies) not in answers[0].text
    # the configured patterns (the DAGs folder's path) only for who may administer Airflow
    assert str(client.topologies) not in client.get("/api/topologies").text
    client.manager.admin = True
    assert client.get("/api/topologies").json()["patterns"] == [str(client.topologies / "*.yaml")]


def test_no_listing_or_view_shows_a_non_admin_the_topology_files_path(client):
    """Issue 38, item 5: the file's name only; its path (the DAGs folder's) is for admins, as the patterns."""
    (client.topologies / "payments.yaml").write_text("topic: payments\ngroup_id: svc\nattempts: 3\n")
    (client.topologies / "broken.yaml").write_text("topic: x\n")
    listing = client.get("/api/topologies")
    assert str(client.topologies) not in listing.text
    by_source = {t["source"]: t for t in listing.json()["topologies"]}
    assert set(by_source) == {"payments.yaml", "broken.yaml"}
    assert by_source["broken.yaml"]["error"] == "broken.yaml: field 'group_id': is required"
    for item in by_source.values():  # the view of each (no Kafka connection: an error, with the source)
        detail = client.get(f"/api/topologies/{item['id']}")
        assert detail.status_code == 200
        assert detail.json()["source"] == item["source"]
        assert str(client.topologies) not in detail.text
    client.manager.admin = True
    assert {t["source"] for t in client.get("/api/topologies").json()["topologies"]} == {
        str(client.topologies / "payments.yaml"),
        str(client.topologies / "broken.yaml"),
    }


@pytest.mark.timeout(120)
def test_a_refresh_waiting_on_a_topologys_read_answers_busy_at_once(client, monkeypatch):
    """A broker that accepts connections and never answers: the first refresh reads until the timeout; a
    second refresh of the same topology meanwhile must answer "busy" rather than hold a thread waiting."""
    (client.topologies / "orders.yaml").write_text("topic: orders\ngroup_id: svc\nattempts: 2\n")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        use_broker(monkeypatch, f"127.0.0.1:{silent.getsockname()[1]}")
        [item] = client.get("/api/topologies").json()["topologies"]
        with ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(client.get, f"/api/topologies/{item['id']}")
            time.sleep(1)  # the first refresh holds the topology's read
            assert not first.done()
            second = client.get(f"/api/topologies/{item['id']}").json()
            assert not first.done(), "the second refresh waited for the first one"
            first.result()
    finally:
        silent.close()
    errors = [t["backlog"]["error"] for t in second["tiers"]]
    assert all(e and "busy" in e for e in errors), errors
