"""
Least privilege on a secured cluster (issue 48): every role works with exactly the ACLs ``topology acls``
prints, on a broker that authenticates (SASL_SSL SCRAM-SHA-512) and authorizes (no ACL, no access).

Each test has its own users (``role_users``) and topics; the inputs and the checks go through the node's
own listener as a super user (``role_users.internal``), never through a role.
"""

from __future__ import annotations

import json
import time

import pytest

from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_retry_topics, ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.acl import AclScope, acl_bindings
from airflow_kafka_retry.policy.topology import Topology

from tests.support import ledger
from tests.support.cli_run import run_cli

pytestmark = [pytest.mark.integration]

PARTITIONS = 2
COUNT = 70
FAR_FUTURE_MS = 4_102_444_800_000  # 2100: every routed record is due


def _topology_file(tmp_path):
    topology = ledger.make_topology("secure")
    return ledger.write_topology(topology, tmp_path / "topology.yaml"), str(tmp_path / "topology.yaml")


def _no_secret_in(texts, role_users):
    passwords = {role_users.kafka.client_config(n)["sasl.password"] for n in role_users.names.values()}
    passwords.add(role_users.kafka.client_config("admin")["sasl.password"])
    for text in texts:
        assert not any(p in text for p in passwords), "a password was printed"


def _drain(path, tier, config_file, *extra):
    return run_cli(
        "drain", "--topology", path, "--tier", str(tier), "--handler", f"{ledger.HANDLER_MODULE}:indexed",
        "--value-deserializer", f"{ledger.HANDLER_MODULE}:decode", "--kafka-config", str(config_file),
        "--cutoff-ms", str(FAR_FUTURE_MS), "--call-timeout", "10", "--broker-retry", "0", *extra,
    )  # fmt: skip


def test_every_role_works_with_exactly_its_printed_acls(role_users, tmp_path):
    topology, path = _topology_file(tmp_path)
    printed = run_cli(
        "topology", "acls", path, "--include-main", *role_users.principal_args(), "--apply",
        "--admin-config", str(role_users.admin_file), "--bootstrap", role_users.kafka.bootstrap,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    expected = acl_bindings(topology, AclScope(include_main=True))
    assert len(printed.stdout.splitlines()) == len(expected)
    assert f"{len(expected)} ACL binding(s) created" in printed.stderr
    outputs = [printed.stdout, printed.stderr]

    setup = run_cli(
        "topology", "create-topics", path, "--partitions", str(PARTITIONS), "--kafka-config",
        str(role_users.file("setup")),
    )  # fmt: skip
    outputs += [setup.stdout, setup.stderr]
    assert setup.returncode == 0, setup.stderr
    assert set(json.loads(setup.stdout).values()) == {"created"}

    ledger_file = ledger.ledger_path(tmp_path)
    inputs = ledger.produce_inputs(role_users.internal, topology, COUNT, PARTITIONS)
    for tier in topology.tiers:
        run = _drain(path, tier.index, role_users.file("tiers"))
        outputs += [run.stdout, run.stderr]
        assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    ledger.check_ledger(role_users.internal, topology, inputs, ledger_file, PARTITIONS)

    replay = run_cli(
        "dlt", "replay", "--topology", path, "--exception", f"{ledger.HANDLER_MODULE}.PermanentError",
        "--kafka-config", str(role_users.file("replay")),
    )  # fmt: skip
    outputs += [replay.stdout, replay.stderr]
    assert replay.returncode == 0, replay.stderr[-3000:]
    permanent = sum(1 for mode, _, _ in inputs.records.values() if mode == "permanent")
    assert json.loads(replay.stdout)["moved"] == permanent
    _no_secret_in(outputs, role_users)


def _state(role_users, topology):
    """Records in each topic of the path (and its logs) and every tier group's committed offsets."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": role_users.internal})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(topology.topic)]
    counts = {t: n for t in sorted(topics) if (n := len(ledger.read_all(role_users.internal, t)))}
    offsets = {
        tier.topic: ledger.committed(
            role_users.internal, topology.consumer_group(tier), tier.topic, PARTITIONS
        )
        for tier in topology.tiers
    }
    return counts, offsets


class StepFailed(Exception):
    pass


def _steps(role_users, topology):
    """A topology's life, each step as its role: (role, what, step); a step raises or returns a failure."""
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        call_timeout_s=10.0,
        broker_retry_s=0.0,
    )

    def drain(tier):
        def run():
            summary = run_local(
                topology, tier, role_users.config("tiers"), options, cutoff_ms=FAR_FUTURE_MS, parallelism=1
            )
            if not summary.ok:
                raise StepFailed(json.dumps(summary.to_dict()["partitions"]))

        return run

    def replay(dlt):
        request = ReplayRequest(dlt=dlt, exception=[f"{ledger.HANDLER_MODULE}.PermanentError"])
        summary = replay_dlt(topology, role_users.config("replay"), request, broker_retry_s=0.0)
        if summary.moved == 0:
            raise StepFailed(f"replay of {dlt} moved nothing: {summary.to_dict()}")

    setup = role_users.config("setup")
    yield "setup", "create the topics", lambda: ensure_topics(topology, setup, partitions=PARTITIONS)
    yield "setup", "again: they exist", lambda: ensure_topics(topology, setup, partitions=PARTITIONS)
    yield "setup", "the setup task's sizing", lambda: ensure_retry_topics(topology, setup)
    yield "inputs", "produce", lambda: ledger.produce_inputs(role_users.internal, topology, COUNT, PARTITIONS)
    for rounds in ("the inputs", "the records replayed from the DLT"):
        if rounds != "the inputs":
            yield "replay", "replay the DLT", lambda: replay(None)
        for tier in topology.tiers:
            yield "tiers", f"drain tier {tier.index} of {rounds}", drain(tier)


def _one_less_cases():
    """One binding left out at a time, for every binding of the roles the steps run."""
    topology = Topology.from_mapping({"topic": "t", "group_id": "g", **SMALL})
    cases = []
    for role in ("setup", "tiers", "replay"):
        for i, b in enumerate(acl_bindings(topology, AclScope(include_main=True), roles=[role])):
            if "t-parking" in b.name and (role, b.operation) != ("tiers", "WRITE"):
                continue  # needed by a replay from the parking topic, which these steps do not run
            if role == "replay" and b.name.startswith("t-retry-"):
                continue  # a replay target only an explicit --to chooses (records name the main topic)
            cases.append(pytest.param(role, i, id=f"{role}-{b.operation}-{b.resource_type}-{b.name}"))
    return cases


SMALL = {"attempts": 3}


@pytest.mark.parametrize(("role", "index"), _one_less_cases())
def test_one_acl_less_fails_that_role_naming_it_and_moves_nothing(role_users, tmp_path, role, index):
    topic = ledger.unique_topic("lesser")
    topology = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
            **SMALL,
        }
    )
    every = acl_bindings(topology, AclScope(include_main=True))
    missing = acl_bindings(topology, AclScope(include_main=True), roles=[role])[index]
    role_users.grant([b for b in every if b != missing])
    ledger.ledger_path(tmp_path)
    for step_role, what, step in _steps(role_users, topology):  # noqa: B007 - what failed is named
        before = _state(role_users, topology) if step_role != "inputs" else None
        started = time.monotonic()
        try:
            step()
        except Exception as exc:
            message = str(exc)
            break
    else:
        pytest.fail(f"every step passed without {missing}")
    took = time.monotonic() - started
    assert step_role == role, f"{what} failed: {message}"
    # the error names the principal, the operation and the resource
    assert role_users.principals[role] in message, message
    assert missing.operation in message, message
    assert missing.name in message, message
    assert "do not exist" not in message, message
    assert took < 60, f"{what} took {took:.0f} s to fail"  # a liveness bound: the calls' deadlines hold
    assert _state(role_users, topology) == before, f"{what} failed and moved something"


def test_the_read_only_roles_read_with_exactly_their_acls(role_users, tmp_path):
    """The watcher (heads, committed offsets), the view (backlogs) and the DLT watch (count, commit)."""
    from airflow_kafka_retry.engine.scans.backlog import scan_backlog
    from airflow_kafka_retry.engine.scans.dlt_scan import DltWatchSummary, commit_offsets, scan_new_records
    from airflow_kafka_retry.policy.client_names import watch_group

    topology = Topology.from_mapping(
        {
            "topic": ledger.unique_topic("readers"),
            "group_id": "svc",
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
            **SMALL,
        }
    )
    scope = AclScope(include_main=True)
    role_users.grant(acl_bindings(topology, scope))
    ledger.ledger_path(tmp_path)
    ensure_topics(topology, role_users.config("setup"), partitions=PARTITIONS)
    inputs = ledger.produce_inputs(role_users.internal, topology, COUNT, PARTITIONS)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    for tier in topology.tiers[:1]:  # main only: the first retry tier keeps a backlog
        assert run_local(topology, tier, role_users.config("tiers"), options, cutoff_ms=FAR_FUTURE_MS).ok
    routed = len(ledger.read_all(role_users.internal, topology.tiers[1].topic))
    assert routed > 0
    now = int(time.time() * 1000)
    for role in ("watcher", "view"):
        for tier in topology.tiers:
            backlog = scan_backlog(
                role_users.config(role), tier.topic, topology.consumer_group(tier), now_ms=now, timeout_s=20
            )
            assert backlog.error is None, (role, backlog.error)
            expected = 0 if tier.index == 0 else routed if tier.index == 1 else 0
            assert backlog.totals()["backlog"] == expected, (role, tier.topic, backlog.totals())
    group = watch_group(topology.group_id)
    watcher_view = scan_backlog(role_users.config("watcher"), topology.dlt_topic, group, now_ms=now)
    assert watcher_view.error is None, watcher_view.error
    summary = DltWatchSummary(group=group)
    scan = scan_new_records(
        role_users.config("dlt_watch"), [topology.dlt_topic], group, summary, timeout_s=30
    )
    dead = sum(1 for mode, _, _ in inputs.records.values() if mode in ("fatal", "bad-json"))
    assert summary.records == dead
    commit_offsets(role_users.config("dlt_watch"), group, scan.next_offsets)
    offsets = ledger.committed(role_users.internal, group, topology.dlt_topic, PARTITIONS)
    assert {(topology.dlt_topic, p): o for p, o in offsets.items() if o >= 0} == scan.next_offsets
