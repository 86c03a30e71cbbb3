"""The ACL bindings ``ordering: key`` adds (policy/topology/acl.py): the hold and state topics, per role."""

from __future__ import annotations

import json

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.policy.topology.acl import ROLES, AclScope, acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology

HOLD, STATE = "orders-hold", "orders-order-state"


def _orders(**extra):
    data = {"topic": "orders", "group_id": "svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "1s"}}
    return Topology.from_mapping({**data, **extra})


def _order_bindings(topology, scope=None):
    """{role: {(name, operation)}} of the bindings on the hold and state topics."""
    found: dict[str, set[tuple[str, str]]] = {}
    for b in acl_bindings(topology, scope):
        if b.resource_type == "topic" and b.name in (HOLD, STATE):
            found.setdefault(b.role, set()).add((b.name, b.operation))
    return found


def test_each_role_gets_what_it_does_with_the_hold_and_state_topics():
    assert _order_bindings(_orders(ordering="key")) == {
        "setup": {(t, op) for t in (HOLD, STATE) for op in ("DESCRIBE", "CREATE", "DESCRIBE_CONFIGS")},
        # the keeper (main run) reads marks and writes held copies; each tier writes marks; READ and
        # WRITE imply DESCRIBE, so it is not listed
        "tiers": {(HOLD, "READ"), (HOLD, "WRITE"), (STATE, "READ"), (STATE, "WRITE")},
        "watcher": {(HOLD, "READ")},
        "view": {(STATE, "READ"), (HOLD, "DESCRIBE")},  # the blocked keys; a dry run's partition check
    }


def test_without_ordering_there_is_no_binding_on_order_topics():
    assert _order_bindings(_orders()) == {}
    assert _order_bindings(_orders(), AclScope(include_main=True)) == {}


def test_ordering_drains_the_main_topic_unasked():
    """The factory includes ``main`` under ``ordering: key``: its run, group and watcher are granted."""
    bindings = acl_bindings(_orders(ordering="key"), AclScope(include_main=False))
    got = {(b.role, b.resource_type, b.name, b.operation) for b in bindings}
    assert ("tiers", "topic", "orders", "READ") in got
    assert ("tiers", "group", "svc", "READ") in got
    assert ("watcher", "topic", "orders", "READ") in got
    assert ("watcher", "group", "svc", "DESCRIBE") in got


def test_every_tier_run_writes_its_marks_to_the_hold_topic():
    topology = _orders(ordering="key")
    from airflow_kafka_retry.policy.topology.acl import tier_run_bindings

    for tier in topology.tiers:
        needed = {(b.name, b.operation) for b in tier_run_bindings(topology, tier, AclScope())}
        assert (HOLD, "WRITE") in needed
        keeper = {(HOLD, "READ"), (STATE, "READ"), (STATE, "WRITE")}
        assert (keeper <= needed) == (tier.index == 0), tier.topic


def test_the_dlt_watch_and_replay_get_nothing_new():
    roles = ["dlt_watch", "replay"]
    plain = acl_bindings(_orders(), AclScope(include_main=True), roles=roles)
    ordered = acl_bindings(_orders(ordering="key"), AclScope(include_main=True), roles=roles)
    assert plain == ordered


def test_topology_acls_prints_the_order_bindings(tmp_path, capsys):
    path = tmp_path / "orders.yaml"
    path.write_text(
        "topic: orders\ngroup_id: svc\nattempts: 3\nbackoff: {kind: fixed, delay: 1s}\nordering: key\n"
    )
    assert main(["topology", "acls", str(path), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = {(r["role"], r["name"], r["operation"]) for r in printed if r["name"] in (HOLD, STATE)}
    assert ("tiers", STATE, "WRITE") in rows
    assert ("view", STATE, "READ") in rows
    assert {r["role"] for r in printed} <= set(ROLES)
