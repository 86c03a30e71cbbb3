"""Cases 11 to 16: a 3-node Apache Kafka cluster (RF 3, min ISR 2) loses brokers while a tier is drained.

Each case drains the main tier of a fresh topology (3 partitions, RF 3) on the 3-node cluster the run's
cluster files share (``tests/support/cluster_fixtures.py``: healed, every node back in sync, before each
test). At the 2nd chunk of partition 0, right after its routed records were produced and acknowledged
inside the open transaction (``tests/support/cluster_points.py``, in whichever process runs the
partition), the case hurts the cluster: it kills the partition's leader, the transaction coordinator of
its transactional id, the group coordinator of its group, the active controller, freezes the leader for
30 s, or kills two of the three brokers. Then the drain goes on, and the case measures how long after
the fault the run ended and how (finished on the survivors, or failed naming what it waited for).

Every case then brings the brokers back, runs every tier, and checks the full ledger with
``read_committed``: each record in exactly one home, no copy twice in Kafka's outputs, nothing lost.
The engines: the leader's, the transaction coordinator's and the group coordinator's loss in the engine's
worker processes (the same supervised partition as in threads, across a process boundary: the threads
engine meets the other faults here, the controller's loss, the freeze, two brokers down, key order and the
replay). Spark tasks run the same supervised partition (``engine/drain/supervisor.run_partition``) in an
executor's Python worker; the Spark fault cases (``test_spark_crash.py``, ``test_spark_cluster_faults.py``)
kill what Spark runs it in, and the leader's loss is met here by the worker processes.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import KafkaException

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

from tests.conftest import test_broker_kind
from tests.faults.helpers import options
from tests.support import ledger
from tests.support.ledger import FaultInput

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary

    from tests.support.cluster_fixtures import ClusterKeeper

PARTITIONS = 3
RECORDS = 240  # 80 per partition: 4 chunks of 20
CHUNK = 20
MODES = ("ok", "transient:1", "ok", "permanent", "ok", "fatal")
#: A run that has not ended this long after the fault hangs (the target is 60 s; this is liveness only).
HANG_S = 180.0
FREEZE_S = 30.0
HEALED_S = 60.0  # how long the group's coordinator may take to be elected again once the brokers are back
#: The engine's deadlines in these cases, half the defaults (20 s and 30 s) to keep the suite's time: a stuck
#: call is abandoned 15 s after it began instead of 25 s. docs/operations.md has the same cases' figures with
#: the defaults.
CALL_TIMEOUT_S, BROKER_RETRY_S = 10.0, 15.0


@pytest.fixture
def cluster(shared_kafka_cluster: ClusterKeeper) -> ApacheKafkaCluster:
    """The run's 3-node cluster, every node running and in sync."""
    kind = test_broker_kind()
    if kind != "kafka":
        pytest.skip(
            "needs Apache Kafka's jars to start a 3-node cluster the test can kill "
            f"(the suite's broker is {kind})"
        )
    return shared_kafka_cluster.whole()


def _committed_once_healed(cluster: ApacheKafkaCluster, topology: Topology) -> dict[int, int]:
    """The group's committed offsets, asked again while its coordinator is still being elected (60 s)."""
    deadline = time.monotonic() + HEALED_S
    while True:
        try:
            return ledger.committed(cluster.bootstrap, topology.group_id, topology.topic, PARTITIONS)
        except KafkaException:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1)


Fault = Callable[[ApacheKafkaCluster, dict, Topology], str]


def _run(engine: str, topology: Topology, config: dict, opts: DrainOptions) -> RunSummary:
    tier = topology.tier(0)
    if engine == "threads":
        return run_local(topology, tier, config, opts, parallelism=PARTITIONS, in_process=True)
    return run_local(topology, tier, config, opts, parallelism=PARTITIONS)


def _drain_with_fault(
    cluster: ApacheKafkaCluster,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    engine: str,
    topology,
    fault: Fault,
) -> tuple[RunSummary, str, float]:
    """Drain the main tier and hurt the cluster at the fault point: the summary, what was done, and the
    seconds from the fault to the run's end."""
    points = tmp_path / "points"
    points.mkdir()
    monkeypatch.setenv("AKR_POINT_DIR", str(points))
    monkeypatch.setenv("AKR_POINT", "produced")
    monkeypatch.setenv("AKR_SLOW_S", "0.01")
    config = {"bootstrap.servers": cluster.bootstrap}
    opts = DrainOptions(
        handler="tests.support.cluster_handler:indexed",
        batch_size=10,
        chunk_size=CHUNK,
        call_timeout_s=CALL_TIMEOUT_S,
        broker_retry_s=BROKER_RETRY_S,
    )
    outcome: list[RunSummary] = []
    failure: list[BaseException] = []

    def drain() -> None:
        try:
            outcome.append(_run(engine, topology, config, opts))
        except BaseException as exc:  # reported by the test
            failure.append(exc)

    thread = threading.Thread(target=drain, name="faulted-drain", daemon=True)
    thread.start()
    reached = points / "reached"
    deadline = time.monotonic() + 90
    while not reached.exists():
        assert thread.is_alive() or outcome, f"the drain ended before the fault point: {failure or outcome}"
        assert time.monotonic() < deadline, "the drain never reached the fault point"
        time.sleep(0.02)
    facts = json.loads(reached.read_text())
    did = fault(cluster, facts, topology)
    hurt = time.monotonic()
    (points / "go").write_text("go\n")
    thread.join(HANG_S)
    assert not thread.is_alive(), f"the drain hangs: still running {HANG_S:.0f}s after: {did}"
    assert not failure, failure
    assert not (points / "late").exists(), "the fault point waited past its own limit"
    return outcome[0], did, time.monotonic() - hurt


def _run_all_tiers(topology: Topology, config: dict) -> None:
    """Every tier once, in order, in threads of this process (the healed cluster's runs, before and after a
    case: the faulted drains are the cases' engines); each run must succeed on every partition."""
    for tier in topology.tiers:
        summary = run_local(topology, tier, config, options(chunk_size=CHUNK), in_process=True)
        assert summary.ok, json.dumps(summary.to_dict()["partitions"], indent=1)[:3000]


def _report(summary: RunSummary, seconds: float) -> str:
    """How the run ended, for the results table."""
    retried = sorted((p for p in summary.partitions if p.retries), key=lambda p: p.partition)
    if summary.ok:
        how = "the run finished on the survivors"
        if retried:
            first = textwrap.shorten(retried[0].retry_errors[0], 150, placeholder=" ...")
            count, on = sum(p.retries for p in retried), ", ".join(str(p.partition) for p in retried)
            how += f" after {count} retried attempt(s) with fresh clients on partition(s) {on}"
            how += f' (first: "{first}")'
    else:
        failed = summary.failed_partitions[0]
        error, _, gave_up = (failed.error or "").partition(" [gave up")
        error = textwrap.shorten(error, 150, placeholder=" ...")
        how = f'the run failed on partition {failed.partition}: "{error} [gave up{gave_up}"'
    return f"{how}; {seconds:.0f}s from the fault to the run's end"


def _finish_and_account(cluster, topology, inputs, ledger_file):
    cluster.heal()
    config = {"bootstrap.servers": cluster.bootstrap}
    _run_all_tiers(topology, config)
    return ledger.account(
        cluster.bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=False,
        handled_once=False,
    )


def _case(
    cluster, monkeypatch, tmp_path, engine, name, fault, fault_result, *, must_finish: bool | None = True
) -> None:
    """``must_finish``: True, the run finishes on the survivors; False, it fails clearly; None, either."""
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology(f"cluster-{name}")
    specs = [FaultInput(MODES[i % len(MODES)]) for i in range(RECORDS)]
    inputs = ledger.produce_fault_inputs(cluster.bootstrap, topology, specs, PARTITIONS)
    summary, did, seconds = _drain_with_fault(cluster, monkeypatch, tmp_path, engine, topology, fault)
    for failed in summary.failed_partitions:  # a failure names the partition and what it waited for
        assert f"{topology.topic}[{failed.partition}]" in (failed.error or ""), failed.error
        assert "gave up after" in (failed.error or ""), failed.error
    if must_finish:
        assert summary.ok, json.dumps([p.to_dict() for p in summary.failed_partitions], indent=1)[:3000]
    elif must_finish is False:
        assert not summary.ok, "the run finished although min ISR could not be met"
        cluster.heal()
        committed = _committed_once_healed(cluster, topology)
        assert committed[0] == CHUNK, f"partition 0 committed past the faulted chunk: {committed}"
    monkeypatch.delenv("AKR_POINT_DIR")
    account = _finish_and_account(cluster, topology, inputs, ledger_file)
    fault_result(f"{engine}: {did}; {_report(summary, seconds)}; the next runs completed", account)


# ----------------------------------------------------------------------------- the faults
def kill_leader(cluster, facts, topology) -> str:
    node = cluster.leader_of(topology.topic, facts["partition"])
    cluster.kill(node)
    return f"SIGKILLed broker {node}, leader of partition 0"


def kill_txn_coordinator(cluster, facts, topology) -> str:
    node = cluster.transaction_coordinator(facts["transactional_id"])
    cluster.kill(node)
    return f"SIGKILLed broker {node}, transaction coordinator of partition 0's transactional id"


def kill_group_coordinator(cluster, facts, topology) -> str:
    node = cluster.group_coordinator(topology.group_id)
    cluster.kill(node)
    return f"SIGKILLed broker {node}, coordinator of the tier's group"


def kill_controller(cluster, facts, topology) -> str:
    node = cluster.active_controller()
    cluster.kill(node)
    return f"SIGKILLed broker {node}, the active controller"


def freeze_leader(cluster, facts, topology) -> str:
    node = cluster.leader_of(topology.topic, facts["partition"])
    cluster.freeze(node)
    threading.Timer(FREEZE_S, cluster.thaw, (node,)).start()
    return f"SIGSTOPped broker {node}, leader of partition 0, for {FREEZE_S:.0f}s"


def kill_two(cluster, facts, topology) -> str:
    first = cluster.leader_of(topology.topic, facts["partition"])
    second = next(n for n in cluster.node_ids if n != first)
    cluster.kill(first)
    cluster.kill(second)
    return f"SIGKILLed brokers {first} (leader of partition 0) and {second}: min ISR 2 cannot be met"


INJECTED = (
    "at the 2nd chunk of partition 0, after its routed records were acknowledged inside the open transaction"
)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes"])
@pytest.mark.fault_case(
    "11", f"the leader of the drained partition SIGKILLed {INJECTED} (3 brokers, RF 3, min ISR 2)"
)
def test_the_leader_dies_and_the_drain_finishes_on_the_survivors(
    cluster, monkeypatch, tmp_path, fault_result, engine
):
    _case(cluster, monkeypatch, tmp_path, engine, "leader", kill_leader, fault_result)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes"])
@pytest.mark.fault_case(
    "12",
    f"the transaction coordinator of the partition's transactional id SIGKILLed {INJECTED}, "
    "between produce and commit",
)
def test_the_transaction_coordinator_dies_mid_transaction(
    cluster, monkeypatch, tmp_path, fault_result, engine
):
    _case(cluster, monkeypatch, tmp_path, engine, "txn", kill_txn_coordinator, fault_result)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes"])
@pytest.mark.fault_case(
    "13", f"the group coordinator SIGKILLed {INJECTED}, before send_offsets_to_transaction"
)
def test_the_group_coordinator_dies_before_the_offsets_are_sent(
    cluster, monkeypatch, tmp_path, fault_result, engine
):
    _case(cluster, monkeypatch, tmp_path, engine, "group", kill_group_coordinator, fault_result)


@pytest.mark.slow
@pytest.mark.fault_case("14", f"the active KRaft controller SIGKILLed {INJECTED}")
def test_the_active_controller_dies(cluster, monkeypatch, tmp_path, fault_result):
    _case(cluster, monkeypatch, tmp_path, "threads", "controller", kill_controller, fault_result)


@pytest.mark.slow
@pytest.mark.fault_case(
    "15", f"the leader of the drained partition frozen (SIGSTOP, SIGCONT {FREEZE_S:.0f}s later) {INJECTED}"
)
def test_a_frozen_leader_slows_the_drain_and_it_finishes(cluster, monkeypatch, tmp_path, fault_result):
    # a 30 s freeze is as long as the suite's halved deadlines (10 s + 5 s, then 15 s of retries): the run
    # finishes once the broker thaws, or fails clearly just before; either is the target (within 60 s)
    _case(cluster, monkeypatch, tmp_path, "threads", "freeze", freeze_leader, fault_result, must_finish=None)


@pytest.mark.slow
@pytest.mark.fault_case(
    "16",
    f"two of the three brokers SIGKILLed {INJECTED}: min ISR 2 cannot be met, and the controller "
    "quorum is lost",
)
def test_two_brokers_down_fail_the_run_clearly_and_the_next_run_finishes(
    cluster, monkeypatch, tmp_path, fault_result
):
    _case(cluster, monkeypatch, tmp_path, "threads", "two-down", kill_two, fault_result, must_finish=False)


def test_a_replication_factor_1_topic_is_named_by_ensure_topics_and_topology_show(cluster, tmp_path, capsys):
    """Not a fault case: on the same cluster, a main topic created with RF 1 is named as a single point of
    failure by ``ensure_retry_topics`` (the setup task) and by ``topology show --bootstrap``."""
    from airflow_kafka_retry.cli import main
    from airflow_kafka_retry.engine.kafka.topic_admin import ensure_retry_topics
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics

    topology = ledger.make_fault_topology("cluster-rf1")
    create_topics(cluster.bootstrap, [topology.topic], PARTITIONS, replication_factor=1)
    report = ensure_retry_topics(topology, {"bootstrap.servers": cluster.bootstrap})
    assert report.created, report
    assert len(report.replication_warnings) == 1, report.replication_warnings  # the retry topics got RF 3
    assert (
        f"topic {topology.topic!r} has replication factor 1 on a cluster of 3 brokers"
        in (report.replication_warnings[0])
    )
    path = ledger.write_fault_topology(topology, tmp_path / "rf1.yaml").source
    capsys.readouterr()
    assert main(["topology", "show", str(path), "--bootstrap", cluster.bootstrap]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["replication_warnings"] == report.replication_warnings
    assert f"warning: {path}: topic {topology.topic!r} has replication factor 1" in err


def _watch_until_it_succeeds(run: Callable[[], int], error: type[Exception]) -> tuple[int, int]:
    """A thawed broker was fenced meanwhile and rejoins; runs fail until it has: the first success, runs."""
    deadline, runs = time.monotonic() + 90, 0
    while True:
        runs += 1
        try:
            return run(), runs
        except error:
            assert time.monotonic() < deadline, "no watch run succeeded within 90 s of the thaw"
            time.sleep(1)


@pytest.mark.slow
@pytest.mark.fault_case(
    "17",
    "a DLT watch run (scan, then commit) while the coordinator of the watch's group is frozen (SIGSTOP), "
    "then again once it is thawed",
)
def test_a_dlt_watch_run_ends_while_its_group_coordinator_is_frozen(cluster, tmp_path, fault_result):
    from airflow_kafka_retry.engine.scans.dlt_scan import (
        DltWatchError,
        DltWatchSummary,
        commit_offsets,
        scan_new_records,
    )

    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("cluster-watch")
    specs = [FaultInput(MODES[i % len(MODES)]) for i in range(60)]
    inputs = ledger.produce_fault_inputs(cluster.bootstrap, topology, specs, PARTITIONS)
    config = {"bootstrap.servers": cluster.bootstrap}
    _run_all_tiers(topology, config)
    dlts = [t.topic for t in topology.dlt_tiers]
    group = f"{topology.group_id}-dlt-watch"

    def watch(timeout_s: float) -> DltWatchSummary:
        summary = DltWatchSummary(group=group)
        scan = scan_new_records(config, dlts, group, summary, timeout_s=timeout_s)
        commit_offsets(config, group, scan.next_offsets)
        return summary

    node = cluster.group_coordinator(group)
    cluster.freeze(node)
    frozen_at = time.monotonic()
    try:
        outcome = f"reported {watch(8.0).records} record(s)"
    except DltWatchError as exc:
        outcome = f'failed: "{textwrap.shorten(str(exc), 200, placeholder=" ...")}"'
    took = time.monotonic() - frozen_at
    cluster.thaw(node)
    assert took < HANG_S, f"the watch run hung {took:.0f}s"  # liveness: it ended (the target is its bound)
    first, runs = _watch_until_it_succeeds(lambda: watch(15.0).records, DltWatchError)
    assert watch(30.0).records == 0  # reported and committed: nothing new
    account = _finish_and_account(cluster, topology, inputs, ledger_file)
    # Counted once everything settled, not right after the drain: a committed transaction's markers reach the
    # DLT partitions after commit_transaction returns (later still while the cluster recovers from the last
    # case), and until they do, a read_committed read ends before its records (CI once counted 10 of 20).
    dead = sum(len(ledger.read_all(cluster.bootstrap, t)) for t in dlts)
    assert first + (0 if outcome.startswith("failed") else int(outcome.split()[1])) == dead
    fault_result(
        f"broker {node} (the watch group's coordinator) frozen: the run {outcome} after {took:.0f}s "
        f"(scan timeout 8 s); once thawed, the next successful run (of {runs}) reported {first} of the "
        f"{dead} dead letters and the one after none",
        account,
    )


@pytest.mark.slow
@pytest.mark.fault_case(
    "18",
    "a DLT replay (chunks of 10) whose transaction coordinator is SIGKILLed inside its 2nd chunk's "
    "transaction, after the copies were acknowledged and before their log entries commit",
)
def test_a_replay_survives_its_transaction_coordinator_moving_exactly_once(
    cluster, monkeypatch, tmp_path, fault_result
):
    from airflow_kafka_retry.dlt import replay_moves
    from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
    from airflow_kafka_retry.policy.headers.codec import last_header
    from airflow_kafka_retry.policy.headers.replay import REPLAY_ID

    ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("cluster-replay")
    inputs = ledger.produce_fault_inputs(
        cluster.bootstrap, topology, [FaultInput("fatal") for _ in range(30)], PARTITIONS
    )
    config = {"bootstrap.servers": cluster.bootstrap}
    _run_all_tiers(topology, config)
    dlt = topology.dlt_tiers[0].topic
    assert len(ledger.read_all(cluster.bootstrap, dlt)) == len(inputs.records)

    replay = Replay(topology, config, ReplayRequest(), chunk_size=10, broker_retry_s=BROKER_RETRY_S)
    original_key, entries, reached, go = replay_moves.record_key, [0], threading.Event(), threading.Event()

    def key_of_log_entry(partition: int, offset: int) -> bytes:
        entries[0] += 1
        if (
            entries[0] == 11
        ):  # the 2nd chunk's first log entry: its copies are acknowledged, nothing committed
            reached.set()
            go.wait(60)
        return original_key(partition, offset)

    monkeypatch.setattr(replay_moves, "record_key", key_of_log_entry)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(_run_or_error(replay.run)), daemon=True)
    thread.start()
    assert reached.wait(90), "the replay never reached its 2nd chunk"
    node = cluster.transaction_coordinator(replay.transactional_id)
    cluster.kill(node)
    hurt = time.monotonic()
    go.set()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"the replay hangs {HANG_S:.0f}s after its coordinator died"
    took = time.monotonic() - hurt
    [summary] = outcome
    assert not isinstance(summary, BaseException), summary
    cluster.heal()
    # every DLT record has exactly one replayed copy in the main topic (read_committed), and one log entry
    copies = [
        m for m in ledger.read_all(cluster.bootstrap, topology.topic) if last_header(m.headers(), REPLAY_ID)
    ]
    ids = [ledger._fault_id(m) for m in copies]
    assert sorted(ids) == sorted(inputs.records), (len(ids), len(inputs.records))
    logged = [
        m.key()
        for m in ledger.read_all(cluster.bootstrap, replay.log_topic)
        if m.key().startswith(b"record/")
    ]
    assert len(logged) == len(set(logged)) == len(inputs.records)
    account = ledger.Account(len(inputs.records), 0, len(inputs.records), 0, {}, 0)
    fault_result(
        f"SIGKILLed broker {node}, the replay's transaction coordinator; the replay finished after "
        f"{replay.retries} retried attempt(s) under the same replay id, {took:.0f}s after the kill; "
        f"{summary.moved} moved by the last attempt, {summary.moved_before} by the ones before; each of the "
        f"{len(ids)} DLT records has one copy in the main topic and one log entry (read_committed)",
        account,
    )


def _run_or_error(run: Callable[[], object]) -> object:
    try:
        return run()
    except Exception as exc:  # the test names it
        return exc


# ----------------------------------------------------------------------------- key order (issue 50)
def _key_ordered_drain_losing_its_leader(cluster, tmp_path: Path, topology: Topology, opts) -> str:
    """Drain the main tier in threads; at partition 0's 2nd chunk (routed records acknowledged inside the open
    transaction) SIGKILL that partition's leader; the run must finish on the survivors. What was done."""
    points = tmp_path / "points"
    points.mkdir()
    config = {"bootstrap.servers": cluster.bootstrap}
    outcome: list = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            _run_or_error(lambda: run_local(topology, topology.tier(0), config, opts, in_process=True))
        ),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 90
    while not (points / "reached").exists():
        assert thread.is_alive(), f"the drain ended before the fault point: {outcome}"
        assert time.monotonic() < deadline, "the drain never reached the fault point"
        time.sleep(0.02)
    did = kill_leader(cluster, json.loads((points / "reached").read_text()), topology)
    (points / "go").write_text("go\n")
    thread.join(HANG_S)
    assert not thread.is_alive(), f"the drain hangs: still running {HANG_S:.0f}s after: {did}"
    [summary] = outcome
    assert not isinstance(summary, BaseException), summary
    assert summary.ok, json.dumps([p.to_dict() for p in summary.failed_partitions], indent=1)[:3000]
    return did


@pytest.mark.slow
def test_a_key_ordered_ledger_keeps_its_order_when_the_leader_dies(cluster, monkeypatch, tmp_path):
    """Issue 50: 600 records over 60 keys (``testkit/ordering_ledger.py``), ``ordering: key``; the main
    drain loses partition 0's leader mid-chunk and finishes on the survivors; then every tier in passes: per
    key the handled sequence is the produced one minus the dead-lettered records, in order; the DLT holds
    exactly those, once each (``read_committed``)."""
    from airflow_kafka_retry.sandbox.scratch_topics import unique_topic
    from testkit import ordering_ledger as ol

    seed, path = 52, str(tmp_path / "order-ledger.txt")
    for name, value in ((ol.LEDGER_ENV, path), (ol.SEED_ENV, str(seed)), ("AKR_POINT", "produced")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AKR_POINT_DIR", str(tmp_path / "points"))
    topic = unique_topic("cluster-ordered")
    topology = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": f"{topic}-svc",
            "attempts": 3,
            "backoff": {"kind": "fixed", "delay": "0ms"},
            "ordering": "key",
        },
        source=f"<cluster ordering {topic}>",
    )
    config = {"bootstrap.servers": cluster.bootstrap}
    ensure_topics(topology, {"bootstrap.servers": cluster.bootstrap}, partitions=PARTITIONS)
    plan = ol.plan(600, 60, seed)
    ol.produce(cluster.bootstrap, topic, plan.records)
    opts = DrainOptions(
        handler="tests.support.ordering_cluster_handler:handle",
        batch_size=10,
        chunk_size=CHUNK,
        call_timeout_s=CALL_TIMEOUT_S,
        # the keeper's attempts also need the leaders of its hold and state partitions, each of which may be
        # elected anew after the kill: three times the others' budget (15 s ran out on a loaded CI machine)
        broker_retry_s=3 * BROKER_RETRY_S,
    )
    did = _key_ordered_drain_losing_its_leader(cluster, tmp_path, topology, opts)
    monkeypatch.delenv("AKR_POINT_DIR")
    cluster.heal()

    passes, _ = ol.settle(
        topology.tiers, lambda tier: run_local(topology, tier, config, opts, in_process=True), plan, path
    )

    # a chunk whose commit failed with the leader is handled again by its run (handling is at least once)
    report = ol.check_order(plan, ol.read_ledger(path), retried=True)
    assert report.holds, f"seed {seed}, {did}, {passes} passes after: " + "; ".join(report.problems)
    assert report.handled == len(plan.records) - len(plan.dead())
    assert topology.dlt_topic
    dead = [ol.parse(m.value())[:2] for m in ledger.read_all(cluster.bootstrap, topology.dlt_topic)]
    assert sorted(dead) == sorted(plan.dead()), "the DLT differs from the dead records (or holds one twice)"
