"""The view's JSON endpoints in-process (FastAPI TestClient) on the embedded broker, and with the broker down.

Authentication is Airflow's: here the user dependency is overridden and the permission check is a
stub, so these tests are about what the endpoints read and return; the API-server test
(test_view_page.py) runs them behind Airflow's real authentication.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from confluent_kafka import Producer
from fastapi.testclient import TestClient

from airflow_kafka_retry.plugin import app as view_app
from airflow_kafka_retry.policy.headers import BACKOFF_TIMESTAMP, encode_big_integer
from airflow_kafka_retry.testing.topics import create_topics, delete_topics, unique_topic

pytestmark = pytest.mark.integration

SECRET = "view-s3cr3t-password"


@pytest.fixture
def client(monkeypatch, tmp_path):
    from airflow.api_fastapi.core_api.security import get_user

    app = view_app.create_app()
    app.dependency_overrides[get_user] = lambda: "someone"
    allowed: set[str] = set()
    monkeypatch.setattr(view_app, "_may", lambda user, method, dag_id, run=False: method == "GET" or dag_id in allowed)
    monkeypatch.setattr(view_app.runs, "last_runs", lambda dag_id, limit: [{"run_id": f"{dag_id}-r1", "state": "success",
                                                                           "summary": {"totals": {"drained": 3}}}])
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TOPOLOGIES", str(tmp_path / "topologies" / "*.yaml"))
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__TIMEOUT", "3")
    (tmp_path / "topologies").mkdir()
    with TestClient(app) as test_client:
        test_client.allowed = allowed  # type: ignore[attr-defined]
        test_client.topologies = tmp_path / "topologies"  # type: ignore[attr-defined]
        yield test_client


def use_broker(monkeypatch, bootstrap: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, "sasl.password": SECRET}}))


def test_topology_view_counts_what_is_on_the_broker(client, monkeypatch, kafka_bootstrap):
    name = unique_topic("viewapi")
    (client.topologies / "orders.yaml").write_text(
        f"topic: {name}\ngroup_id: svc\nattempts: 3\nbackoff: {{kind: fixed, delay: 30s}}\n")
    (client.topologies / "broken.yaml").write_text("topic: x\n")
    topics = [name, f"{name}-retry-1", f"{name}-retry-2", f"{name}-dlt"]
    create_topics(kafka_bootstrap, topics, 2)
    try:
        use_broker(monkeypatch, kafka_bootstrap)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        now = int(time.time() * 1000)
        for i in range(5):
            producer.produce(f"{name}-retry-1", b"{}", partition=i % 2,
                             headers=[(BACKOFF_TIMESTAMP, encode_big_integer(now - 1000 if i < 3 else now + 600_000))])
        producer.produce(f"{name}-dlt", b"{}", partition=0, headers=[("kafka_exception-fqcn", b"myapp.Invalid")])
        assert producer.flush(15) == 0
        client.allowed.add(f"kafka_retry__{name}-retry-1")

        listing = client.get("/api/topologies").json()["topologies"]
        by_source = {item["source"].rsplit("/", 1)[1]: item for item in listing}
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
    assert tier1["backlog"]["totals"]["due"]["now"] == 3 and tier1["backlog"]["totals"]["due"]["hour"] == 2
    assert tier1["dag_id"] == f"kafka_retry__{name}-retry-1" and tier1["can_trigger"] is True
    assert tiers[f"{name}-retry-2"]["can_trigger"] is False
    assert tier1["runs"][0]["run_id"] == f"kafka_retry__{name}-retry-1-r1"
    dlt, parking = view["dead_letter_topics"]
    assert dlt["topic"] == f"{name}-dlt" and dlt["counts"]["by_exception"] == {"myapp.Invalid": 1}
    assert dlt["replay_dag_id"] == parking["replay_dag_id"] == f"kafka_dlt_replay__{name}"
    assert (parking["topic"], parking["kind"]) == (f"{name}-parking", "parking")
    assert parking["counts"]["error"] == f"{name}-parking: topic(s) {name}-parking do not exist on the cluster; " \
        "create the topology's topics first (airflow-kafka-retry topology create-topics FILE)"
    body = json.dumps(view)
    assert SECRET not in body and kafka_bootstrap not in body, "no Kafka configuration reaches the browser"


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
        assert error and error.startswith(f"{topic}: "), error
    assert view["dead_letter_topics"][0]["counts"]["error"].startswith("orders-dlt: ")


def test_missing_connection_and_unknown_topology(client, monkeypatch):
    (client.topologies / "orders.yaml").write_text("topic: orders\ngroup_id: svc\n")
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__KAFKA_CONN_ID", "no_such_kafka")
    [item] = client.get("/api/topologies").json()["topologies"]
    view = client.get(f"/api/topologies/{item['id']}").json()
    assert view["error"].startswith("connection 'no_such_kafka': ")
    missing = client.get("/api/topologies/nope-123456")
    assert missing.status_code == 404 and "no topology 'nope-123456'" in missing.json()["detail"]


def test_the_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "<title>Retry tiers</title>" in page.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../plugin.py").status_code == 404
