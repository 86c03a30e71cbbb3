"""The ACL bindings of each role, derived from the topology and the drain options (policy/topology/acl.py)."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.policy.client_names import transactional_id
from airflow_kafka_retry.policy.topology.acl import ROLES, AclScope, acl_bindings, as_commands, principals_for
from airflow_kafka_retry.policy.topology.model import Topology


def _orders(**extra):
    data = {"topic": "orders", "group_id": "svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "1s"}}
    return Topology.from_mapping({**data, **extra})


def _set(bindings, role):
    return {(b.resource_type, b.name, b.pattern, b.operation) for b in bindings if b.role == role}


def test_tier_runs_get_their_tiers_destinations_groups_and_transactional_prefixes():
    topology = _orders()
    got = _set(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]), "tiers")
    assert got == {
        ("topic", "orders", "literal", "READ"),
        ("topic", "orders-retry-1", "literal", "READ"),
        ("topic", "orders-retry-2", "literal", "READ"),
        ("topic", "orders-retry-1", "literal", "WRITE"),
        ("topic", "orders-retry-2", "literal", "WRITE"),
        ("topic", "orders-dlt", "literal", "WRITE"),
        ("topic", "orders-parking", "literal", "WRITE"),
        ("group", "svc", "literal", "READ"),
        ("group", "svc-orders-retry-1", "literal", "READ"),
        ("group", "svc-orders-retry-2", "literal", "READ"),
        ("transactional_id", "airflow-kafka-retry.svc/", "prefixed", "WRITE"),
        ("transactional_id", "airflow-kafka-retry.svc-orders-retry-1/", "prefixed", "WRITE"),
        ("transactional_id", "airflow-kafka-retry.svc-orders-retry-2/", "prefixed", "WRITE"),
        ("topic", "orders-dlt-replay-log", "literal", "READ"),
        ("topic", "orders-parking-replay-log", "literal", "READ"),
        ("group", "airflow-kafka-retry.reader.", "prefixed", "READ"),  # the replay logs' reader
    }
    # the engine's own transactional id falls under the granted prefix, and not under the replay's
    tier = topology.tiers[1]
    engine_id = transactional_id("airflow-kafka-retry.", topology.consumer_group(tier), tier.topic, 7)
    assert engine_id.startswith("airflow-kafka-retry.svc-orders-retry-1/")


def test_without_include_main_the_main_topic_and_group_are_not_granted():
    got = _set(acl_bindings(_orders(), roles=["tiers", "watcher", "view"]), "tiers")
    assert ("topic", "orders", "literal", "READ") not in got
    assert ("group", "svc", "literal", "READ") not in got


def test_a_custom_transactional_id_prefix_and_replay_target_are_followed():
    scope = AclScope(transactional_id_prefix="team-a.", replay_targets=("orders-audit",))
    bindings = acl_bindings(_orders(), scope, roles=["tiers", "replay"])
    txn = {b.name for b in bindings if b.resource_type == "transactional_id"}
    assert txn == {
        "team-a.svc-orders-retry-1/",
        "team-a.svc-orders-retry-2/",
        "team-a.replay/orders-dlt",
        "team-a.replay/orders-parking",
    }
    assert ("topic", "orders-audit", "literal", "WRITE") in _set(bindings, "replay")


def test_replay_reads_dlts_and_parking_writes_tiers_and_its_log_never_the_tier_ids():
    got = _set(
        acl_bindings(_orders(dlt_routing={"-validation-dlt": ["x.Invalid"]}), roles=["replay"]), "replay"
    )
    for source in ("orders-dlt", "orders-validation-dlt", "orders-parking"):
        assert ("topic", source, "literal", "READ") in got
        for op in ("READ", "WRITE", "CREATE"):
            assert ("topic", f"{source}-replay-log", "literal", op) in got
        assert ("transactional_id", f"airflow-kafka-retry.replay/{source}", "literal", "WRITE") in got
    writes = {name for kind, name, _, op in got if kind == "topic" and op == "WRITE"}
    assert writes - {n for n in writes if n.endswith("-replay-log")} == {
        "orders",
        "orders-retry-1",
        "orders-retry-2",
    }
    assert ("group", "airflow-kafka-retry.reader.", "prefixed", "READ") in got
    assert not any(kind == "transactional_id" and pattern == "prefixed" for kind, _, pattern, _ in got)


def test_setup_watchers_dlt_watch_and_view_only_read_or_create():
    bindings = acl_bindings(_orders(), roles=["setup", "watcher", "dlt_watch", "view"])
    assert {b.operation for b in bindings} == {"READ", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS"}
    assert {b.operation for b in bindings if b.role != "setup"} == {"READ", "DESCRIBE"}
    assert ("group", "svc-dlt-watch", "literal", "READ") in _set(bindings, "dlt_watch")
    assert ("group", "svc-dlt-watch", "literal", "DESCRIBE") in _set(bindings, "watcher")
    # the watcher's DLT lane watches what the DLT watch counts: the parking topic too, once it exists
    dead = {n for kind, n, _, op in _set(bindings, "dlt_watch") if kind == "topic"}
    assert dead <= {n for kind, n, _, op in _set(bindings, "watcher") if kind == "topic" and op == "READ"}
    assert {n for _, n, _, op in _set(bindings, "setup") if op == "CREATE"} == {
        "orders",
        "orders-retry-1",
        "orders-retry-2",
        "orders-dlt",
        "orders-parking",
    }


def test_the_view_reads_the_replay_logs_and_writes_nothing():
    """A replay log is what the tier runs trust: a DLT page's Stop writes with the replay role's principal."""
    view = _set(acl_bindings(_orders(), AclScope(replay_targets=("audit", "orders")), roles=["view"]), "view")
    logs = {(n, op) for _, n, _, op in view if n.endswith("-replay-log")}
    assert logs == {("orders-dlt-replay-log", "READ"), ("orders-parking-replay-log", "READ")}
    assert {op for *_, op in view} == {"READ", "DESCRIBE"}
    # the dry run checks that a target exists: DESCRIBE on an allowed target off the path, nothing more
    assert ("topic", "audit", "literal", "DESCRIBE") in view
    assert not any(n == "audit" and op != "DESCRIBE" for _, n, _, op in view)
    assert {(n, op) for _, n, _, op in view if n == "orders"} == {("orders", "READ")}


def test_share_group_input_drains_its_dlq_and_redelivers_only_to_the_named_sources():
    topology = _orders(
        group_id="svc-retry",
        input={"family": "share-group", "dlq": "dlq.orders-share"},
        on_due="redeliver",
    )
    with pytest.raises(ValueError, match="--source-topic"):
        acl_bindings(topology, roles=["tiers"])
    bindings = acl_bindings(
        topology, AclScope(source_topics=("payments",)), roles=["tiers", "setup", "replay"]
    )
    tiers = _set(bindings, "tiers")
    assert ("topic", "dlq.orders-share", "literal", "READ") in tiers  # tier 0 without --include-main
    assert ("group", "svc-retry", "literal", "READ") in tiers
    assert ("topic", "payments", "literal", "WRITE") in tiers
    for op in ("READ", "WRITE", "CREATE"):
        assert ("topic", "orders-redelivery-log", "literal", op) in tiers
    # the share group's DLQ is the broker's to create, and no replay writes back into it
    assert ("topic", "dlq.orders-share", "literal", "CREATE") not in _set(bindings, "setup")
    assert ("topic", "dlq.orders-share", "literal", "WRITE") not in _set(bindings, "replay")


def test_spring_compat_preset_names_follow_spring():
    # Spring 3.2: one reused retry topic for a fixed back-off, its group {group_id}{suffix}
    topology = _orders(compat="spring-3.2")
    got = _set(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]), "tiers")
    assert ("topic", "orders-retry", "literal", "READ") in got
    assert ("topic", "orders-retry", "literal", "WRITE") in got  # a reused tier routes into itself
    assert ("group", "svc-retry", "literal", "READ") in got
    assert ("transactional_id", "airflow-kafka-retry.svc-retry/", "prefixed", "WRITE") in got
    # delay suffixing of a growing back-off
    growing = _orders(compat="spring-3.2", backoff={"kind": "exponential", "initial": "1s", "multiplier": 2})
    groups = {
        b.name
        for b in acl_bindings(growing, roles=["tiers"])
        if b.resource_type == "group" and b.pattern == "literal"
    }
    assert groups == {"svc-retry-1000", "svc-retry-2000"}


def test_no_binding_twice_and_every_role_known():
    bindings = acl_bindings(_orders(), AclScope(include_main=True))
    assert len(bindings) == len(set(bindings))
    assert {b.role for b in bindings} == set(ROLES)
    with pytest.raises(ValueError, match="unknown role"):
        acl_bindings(_orders(), roles=["admin"])


def test_commands_name_principal_operation_and_resource():
    bindings = acl_bindings(_orders(), roles=["replay"])
    lines = as_commands(bindings, principals_for(["replay=User:ops"]), "k:9093")
    assert len(lines) == len(bindings)
    assert (
        "kafka-acls.sh --bootstrap-server k:9093 --command-config admin.properties --add --allow-principal "
        "User:ops --operation Write --transactional-id airflow-kafka-retry.replay/orders-dlt "
        "--resource-pattern-type literal"
    ) in lines
    with pytest.raises(ValueError, match="ROLE=TYPE:NAME"):
        principals_for(["replay=ops"])


def test_cli_prints_json_for_chosen_roles(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("topic: orders\ngroup_id: svc\nattempts: 2\n")
    assert (
        main(
            [
                "topology",
                "acls",
                str(path),
                "--role",
                "dlt_watch",
                "--format",
                "json",
                "--principal",
                "dlt_watch=User:watch",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert {(r["principal"], r["resource_type"], r["name"], r["operation"]) for r in rows} == {
        ("User:watch", "topic", "orders-dlt", "READ"),
        ("User:watch", "topic", "orders-parking", "READ"),
        ("User:watch", "group", "svc-dlt-watch", "READ"),
    }


def test_cli_apply_needs_an_admin_config(tmp_path, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("topic: orders\ngroup_id: svc\n")
    assert main(["topology", "acls", str(path), "--apply"]) == 2
    assert "--admin-config" in capsys.readouterr().err


def test_the_docs_table_is_the_commands_output(tmp_path, capsys):
    """docs/security.md shows `topology acls --format table` for its example topology, verbatim."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    example = re.search(r"For this topology:\n\n```yaml\n(.*?)```", page, re.S)
    assert example, "docs/security.md lost its example topology"
    path = tmp_path / "orders.yaml"
    path.write_text(example.group(1))
    assert main(["topology", "acls", str(path), "--include-main", "--format", "table"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("| role (principal) |")
    assert printed in page
