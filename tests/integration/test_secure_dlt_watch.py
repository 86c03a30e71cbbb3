"""
The DLT watch on the secured broker (issue 48) with one ACL less: refused at once, naming what it lacks.

* without ``DESCRIBE`` on a DLT, the event-mode watch (``skip_missing_topics``) is told it may not see it
  (``NotAuthorized``), never that it does not exist yet (a skip);
* without ``READ`` on its group, it fails before scanning, naming the principal, the operation and the
  group, instead of waiting out ``scan_timeout`` for a coordinator it may not find.

Each test: its own DLT watch user (``role_users``) and topics; the topics and the checks go through the
node's own listener as a super user (``role_users.internal``).
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient

from airflow_kafka_retry.engine.kafka.clients import NotAuthorized
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.policy.client_names import watch_group
from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import create_topics

from tests.support import ledger
from tests.support.secure_fixtures import RoleUsers

pytestmark = [pytest.mark.integration]

CONN = "akr_sec_watch"
LIVENESS_S = 60  # a bound with room on a loaded 2-core machine; the watch's scan_timeout is 120 s


@pytest.fixture
def role_users(secure_kafka) -> RoleUsers:
    """A fresh user for the DLT watch alone (the only role these tests run)."""
    return RoleUsers(secure_kafka, ["dlt_watch"])


def _watch_without(role_users, monkeypatch, left_out, *, created, nothing_left_out=False):
    """A topology whose ``created`` topics exist, its DLT watch granted its bindings but ``left_out``."""
    topic = ledger.unique_topic("secwatch")
    topology = Topology.from_mapping({"topic": topic, "group_id": f"{topic}-svc", "attempts": 2})
    names = {"dlt": topology.dlt_topic, "parking": topology.parking_topic}
    create_topics(role_users.internal, [topic, *(names[c] for c in created)], 2)
    needed = acl_bindings(topology, AclScope(), roles=["dlt_watch"])
    missing = [b for b in needed if left_out(b, topology)]
    assert bool(missing) != nothing_left_out, missing
    role_users.grant([b for b in needed if b not in missing])
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}",
        json.dumps({"conn_type": "kafka", "extra": role_users.config("dlt_watch")}),
    )
    watch = DltWatchOperator(
        task_id="watch_dlt", topology=topology, kafka_conn_id=CONN, skip_missing_topics=True
    )
    return topology, watch, missing


def test_a_dlt_it_may_not_describe_is_refused_naming_it_not_skipped_as_missing(role_users, monkeypatch):
    topology, watch, _ = _watch_without(
        role_users, monkeypatch, lambda b, t: b.name == t.dlt_topic, created=["dlt"]
    )
    started = time.monotonic()
    with pytest.raises(NotAuthorized) as refused:
        watch.execute({})  # before the fix: AirflowSkipException, "... do(es) not exist yet"
    took = time.monotonic() - started
    message = str(refused.value)
    for named in (role_users.principals["dlt_watch"], "DESCRIBE", topology.dlt_topic):
        assert named in message, message
    assert "not exist" not in message, message
    assert took < LIVENESS_S, f"refused after {took:.0f} s"
    # the parking topic it may see but which does not exist is still missing, and asking did not create it
    listed = AdminClient({"bootstrap.servers": role_users.internal}).list_topics(timeout=10).topics
    assert topology.parking_topic not in listed


def test_a_watch_without_its_group_read_fails_at_once_naming_it(role_users, monkeypatch):
    topology, watch, [missing] = _watch_without(
        role_users,
        monkeypatch,
        lambda b, t: (b.resource_type, b.operation) == ("group", "READ"),
        created=["dlt", "parking"],
    )
    group = watch_group(topology.group_id)
    started = time.monotonic()
    with pytest.raises(NotAuthorized) as failed:
        watch.execute({})
    took = time.monotonic() - started
    message = str(failed.value)
    for named in (role_users.principals["dlt_watch"], f"READ on group '{group}'"):
        assert named in message, message
    # before the fix: scan_timeout (120 s) waited out finding a coordinator the principal may not find
    assert took < LIVENESS_S, f"failed after {took:.0f} s: {message}"
    assert missing.name == group
    committed = ledger.committed(role_users.internal, group, topology.dlt_topic, 2)
    assert all(offset < 0 for offset in committed.values()), committed


def test_with_every_binding_the_first_watch_of_a_fresh_group_is_not_refused(role_users, monkeypatch):
    """The check before the scan refuses nothing the role holds (its group does not exist yet)."""
    topology, watch, _ = _watch_without(
        role_users, monkeypatch, lambda b, t: False, created=["dlt", "parking"], nothing_left_out=True
    )
    result = watch.execute({})
    assert result["totals"]["new_records"] == 0, result
    assert result["dlt_topics_watched"] == [topology.dlt_topic, topology.parking_topic], result
