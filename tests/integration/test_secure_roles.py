"""
Least privilege on a secured cluster (issue 48): every role works with exactly the ACLs ``topology acls``
prints, on a broker that authenticates (SASL_SSL SCRAM-SHA-512) and authorizes (no ACL, no access).

Each test has its own topics and its own users (``role_users``; a one-ACL-less case: a fresh user for the
role it takes the binding from, the other roles' users shared by the module and granted all their bindings
again); the inputs and the checks go through the node's own listener as a super user
(``role_users.internal``), never through a role.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_retry_topics, ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.client_names import replay_log_name
from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import delete_topics

from tests.support import ledger
from tests.support.cli_run import run_cli
from tests.support.secure_fixtures import RoleUsers

pytestmark = [pytest.mark.integration]

PARTITIONS = 2
COUNT = 70
LESS_COUNT = 14  # one-ACL-less cases: every mode of ledger.MODES on both partitions, each step quick
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


def _state(internal, topology):
    """Records in each topic of the path (and its logs) and every tier group's committed offsets."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": internal})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(topology.topic)]
    counts = {t: n for t in sorted(topics) if (n := len(ledger.read_all(internal, t)))}
    offsets = {
        tier.topic: ledger.committed(internal, topology.consumer_group(tier), tier.topic, PARTITIONS)
        for tier in topology.tiers
    }
    return counts, offsets


class StepFailed(Exception):
    pass


OPTIONS = DrainOptions(
    handler=f"{ledger.HANDLER_MODULE}:indexed",
    value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
    call_timeout_s=10.0,
    broker_retry_s=0.0,
)


def _drain_step(topology, config, tier):
    def run():
        # both partitions at once, in threads: a call that fails only at its deadline (the committed offsets
        # without READ on the group: 10 s) is waited for once, not once per partition
        summary = run_local(
            topology, tier, config, OPTIONS, cutoff_ms=FAR_FUTURE_MS, parallelism=PARTITIONS, in_process=True
        )
        if not summary.ok:
            raise StepFailed(json.dumps(summary.to_dict()["partitions"]))

    return run


def _replay(topology, config, source):
    request = ReplayRequest(dlt=source, exception=[f"{ledger.HANDLER_MODULE}.PermanentError"])
    summary = replay_dlt(topology, config, request, broker_retry_s=0.0)
    if summary.moved == 0:
        raise StepFailed(f"replay of {source} moved nothing: {summary.to_dict()}")


def _steps(role_users, topology):
    """A topology's life, each step as its role: (role, what, step); a step raises or returns a failure."""

    def drain(tier):
        return _drain_step(topology, role_users.config("tiers"), tier)

    def replay(dlt):
        _replay(topology, role_users.config("replay"), dlt)

    setup = role_users.config("setup")
    yield "setup", "create the topics", lambda: ensure_topics(topology, setup, partitions=PARTITIONS)
    yield "setup", "again: they exist", lambda: ensure_topics(topology, setup, partitions=PARTITIONS)
    yield "setup", "the setup task's sizing", lambda: ensure_retry_topics(topology, setup)
    internal = role_users.internal
    yield "inputs", "produce", lambda: ledger.produce_inputs(internal, topology, LESS_COUNT, PARTITIONS)
    for rounds in ("the inputs", "the records replayed from the DLT"):
        if rounds != "the inputs":
            yield "replay", "replay the DLT", lambda: replay(None)
        for tier in topology.tiers:
            yield "tiers", f"drain tier {tier.index} of {rounds}", drain(tier)


def _one_less_cases():
    """One binding left out at a time, for every binding of the roles the steps run."""
    topology = Topology.from_mapping({"topic": "t", "group_id": "g", **SMALL})
    cases = []
    for role in ("setup", "tiers"):  # the replay role's: _replay_cases
        for i, b in enumerate(acl_bindings(topology, AclScope(include_main=True), roles=[role])):
            if "t-parking" in b.name and (role, b.operation) != ("tiers", "WRITE"):
                continue  # setup: created with the others; tiers: read when a parking replay fails again
            cases.append(pytest.param(role, i, id=f"{role}-{b.operation}-{b.resource_type}-{b.name}"))
    return cases


SMALL = {"attempts": 3}


def _lesser_topology(name):
    topic = ledger.unique_topic(name)
    return Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "not_retryable": [f"{ledger.HANDLER_MODULE}.InvalidOrder"],
            **SMALL,
        }
    )


@pytest.fixture(scope="module")
def base_users(secure_kafka) -> RoleUsers:
    """The users of the roles a case takes no binding from: each case grants them all theirs again."""
    return RoleUsers(secure_kafka)


@pytest.mark.parametrize(("role", "index"), _one_less_cases())
def test_one_acl_less_fails_that_role_naming_it_and_moves_nothing(
    secure_kafka, base_users, tmp_path, role, index
):
    # the role under test: a fresh user, granted every binding of its row but one, never any other's
    role_users = RoleUsers(secure_kafka, [role], base=base_users)
    topology = _lesser_topology("lesser")
    every = acl_bindings(topology, AclScope(include_main=True))
    missing = acl_bindings(topology, AclScope(include_main=True), roles=[role])[index]
    role_users.grant([b for b in every if b != missing])
    ledger.ledger_path(tmp_path)
    for step_role, what, step in _steps(role_users, topology):  # noqa: B007 - what failed is named
        # the state before each step of the role under test (a step of another that fails fails the test)
        before = _state(role_users.internal, topology) if step_role == role else None
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
    assert _state(role_users.internal, topology) == before, f"{what} failed and moved something"


def _replay_cases():
    """Every binding of the replay role but the retry tiers' (a target only an explicit --to chooses)."""
    topology = Topology.from_mapping({"topic": "t", "group_id": "g", **SMALL})
    bindings = acl_bindings(topology, AclScope(include_main=True), roles=["replay"])
    return [
        pytest.param(i, id=f"replay-{b.operation}-{b.resource_type}-{b.name}")
        for i, b in enumerate(bindings)
        if not b.name.startswith("t-retry-")
    ]


@pytest.fixture(scope="module")
def replay_worlds(secure_kafka, tmp_path_factory):
    """
    Two topologies lived through as the super user, for every replay case (a failed replay moves nothing).

    ``dlt``: drained once, its DLT holds the permanent failures; ``parking``: its DLT replayed and drained
    again, the records that failed again are in its parking topic.
    """
    internal = f"127.0.0.1:{secure_kafka.port}"
    config = {"bootstrap.servers": internal}
    previous = os.environ.get("AKR_LEDGER")
    ledger.ledger_path(tmp_path_factory.mktemp("replay-worlds"))
    worlds = {}
    try:
        for name in ("dlt", "parking"):
            topology = _lesser_topology(f"replayless-{name}")
            ledger.produce_inputs(internal, topology, LESS_COUNT, PARTITIONS)
            for tier in topology.tiers:
                _drain_step(topology, config, tier)()
            if name == "parking":
                _replay(topology, config, None)
                for tier in topology.tiers:
                    _drain_step(topology, config, tier)()
                assert ledger.read_all(internal, topology.parking_topic), "nothing parked"
            worlds[name] = topology
    finally:
        if previous is None:
            os.environ.pop("AKR_LEDGER", None)
        else:
            os.environ["AKR_LEDGER"] = previous
    return worlds


@pytest.mark.parametrize("index", _replay_cases())
def test_one_acl_less_fails_a_replay_naming_it_and_moves_nothing(secure_kafka, replay_worlds, index):
    """From the DLT, and from the parking topic: every binding of the replay role left out in turn."""
    generic = acl_bindings(
        Topology.from_mapping({"topic": "t", "group_id": "g", **SMALL}),
        AclScope(include_main=True),
        roles=["replay"],
    )
    source = "parking" if "parking" in generic[index].name else "dlt"
    topology = replay_worlds[source]
    needed = acl_bindings(topology, AclScope(include_main=True), roles=["replay"])
    missing = needed[index]
    users = RoleUsers(secure_kafka, ["replay"])
    users.grant([b for b in needed if b != missing])
    internal = users.internal
    # an earlier case's replay may have created the (empty) replay log before it failed: not this one's
    source_topic = topology.parking_topic if source == "parking" else topology.dlt_topic
    delete_topics(internal, [replay_log_name(source_topic)])
    before = _state(internal, topology)
    started = time.monotonic()
    with pytest.raises(Exception) as failed:  # noqa: PT011 - what it names is checked below
        _replay(topology, users.config("replay"), "parking" if source == "parking" else None)
    took = time.monotonic() - started
    message = str(failed.value)
    assert not isinstance(failed.value, StepFailed), message
    for named in (users.principals["replay"], missing.operation, missing.name):
        assert named in message, message
    assert "do not exist" not in message, message
    assert took < 60, f"the replay took {took:.0f} s to fail"  # a liveness bound: the calls' deadlines hold
    assert _state(internal, topology) == before, "the replay failed and moved something"


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
