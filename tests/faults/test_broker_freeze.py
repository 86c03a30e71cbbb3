"""Cases 1, 2 and 23: the broker process is frozen (SIGSTOP), then resumed (SIGCONT).

Cases 1 and 2 freeze it inside a chunk's routing:

1. right after the chunk's routed records were handed to the producer, before they are acknowledged
   (inside the open transaction), for longer than the transaction timeout;
2. after the routed records were acknowledged, before the source offsets are committed
   (transactional: before ``send_offsets_to_transaction``/``commit_transaction``; idempotent: before
   the consumer's commit).

The run either fails with a clear error or finishes; the next runs complete; the ledger holds.

23. A paced DLT replay is stopped from the CLI while the broker is frozen (issue 51): see its test.

Issue 48's items 7 and 8 (requests asked of a frozen broker) have their regression tests here too.

The file's tests freeze a broker of their own (``module_broker``: one for the file, its tests one after
another, each leaving it resumed), so no other test is disturbed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import textwrap
import threading
import time
from collections import Counter

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_status import STOP_TIMEOUT_S, ReplayStatusView
from airflow_kafka_retry.engine.local.engine import run_local

from tests.faults.freeze import FREEZE_S, fence_round, freeze_at
from tests.faults.helpers import options, run_all_tiers
from tests.integration.test_replay_rate_stop import COUNT, _copies, _fill, _in_thread, _wait_for_moves
from tests.support import ledger
from tests.support.ledger import Account, FaultInput

PARTITIONS = 2
CHUNK = 30
TXN_TIMEOUT_MS = 4000
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")


@pytest.fixture
def own_broker(module_broker):
    """The file's broker (one JVM for all its tests rather than one a test), resumed after each test
    whatever happened (each test's topics, groups and transactional ids are its own)."""
    assert module_broker.running
    yield module_broker
    with contextlib.suppress(ProcessLookupError):
        os.killpg(module_broker.pid, signal.SIGCONT)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "point", "transactional"),
    [
        pytest.param(
            "1",
            "in-flight",
            True,
            marks=pytest.mark.fault_case(
                "1",
                f"broker SIGSTOPped for {FREEZE_S:g}s inside chunk 2's transaction, right after its routed "
                "records were "
                f"produced and before they were acknowledged (transaction.timeout.ms={TXN_TIMEOUT_MS})",
            ),
        ),
        pytest.param(
            "2",
            "acknowledged",
            True,
            marks=pytest.mark.fault_case(
                "2",
                f"broker SIGSTOPped for {FREEZE_S:g}s between the acknowledged produce of chunk 2's routed "
                "records and "
                f"the offset commit of its transaction (transaction.timeout.ms={TXN_TIMEOUT_MS})",
            ),
        ),
        pytest.param(
            "2",
            "acknowledged",
            False,
            marks=pytest.mark.fault_case(
                "2",
                f"broker SIGSTOPped for {FREEZE_S:g}s between the acknowledged produce of chunk 2's routed "
                "records and "
                "the consumer's offset commit (idempotent mode, no transactions)",
            ),
        ),
    ],
    ids=["1-in-transaction", "2-before-commit-transactional", "2-before-commit-idempotent"],
)
def test_a_frozen_broker_fails_or_finishes_the_run_and_the_next_run_completes(
    own_broker, tmp_path, broker_capabilities, fault_result, case, point, transactional
):
    bootstrap = own_broker.bootstrap
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology(f"freeze-{case}")
    inputs = ledger.produce_fault_inputs(
        bootstrap, topology, [FaultInput(MODES[i % 5]) for i in range(4 * CHUNK)], PARTITIONS
    )
    config = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": TXN_TIMEOUT_MS}
    opts = options(chunk_size=CHUNK, transactional=transactional)

    with freeze_at(own_broker.pid, point) as froze:  # in-process: the router is patched in this process
        first = run_local(topology, topology.tier(0), config, opts, in_process=True)
    assert froze, "the broker was never frozen"
    outcome = first.partitions[0]
    if outcome.status == "failed":
        assert outcome.error
        assert f"{topology.topic}[0]" in outcome.error, outcome.error  # clear: names the partition
        did = (
            f'the run failed on partition 0 with "{textwrap.shorten(outcome.error, 220, placeholder=" ...")}"'
        )
    elif outcome.retries:
        why = textwrap.shorten(outcome.retry_errors[0], 160, placeholder=" ...")
        did = (
            f'partition 0\'s attempt failed ("{why}") and was tried again with fresh clients '
            f"({outcome.retries} retry); the run finished"
        )
    else:
        did = "the run waited for the broker and finished"
    committed = ledger.committed(bootstrap, topology.group_id, topology.topic, PARTITIONS)
    assert committed[0] in (CHUNK, 2 * CHUNK), (
        committed
    )  # chunk 1 committed; chunk 2 only if its commit went through
    assert own_broker.running

    run_all_tiers(topology, config, opts)  # the next runs complete

    # chunk 2 may be handled twice (handling is at least once); with transactions, an aborted chunk's
    # routed records never show (0 copies) unless the broker shows aborted records (Tansu; the own broker
    # is of the session broker's kind); without them, copies are possible by design
    account = ledger.account(
        bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=not (transactional and broker_capabilities.abort_isolation),
        handled_once=False,
    )
    fault_result(
        f"{did} (chunk 2 {'committed' if committed[0] == 2 * CHUNK else 'not committed'}); "
        "the next runs completed",
        account,
    )


def test_an_init_transactions_that_timed_out_on_a_frozen_broker_never_fences_the_next_attempt(own_broker):
    """Issue 48, item 7: an attempt's ``init_transactions`` times out on a frozen coordinator while an
    earlier attempt's transaction is open. librdkafka would go on asking for the producer id in the
    background; once the broker was resumed, its answer often landed after the next attempt's and fenced it
    (the retry failed with "fenced by a newer run": 2 runs of 2 of this test failed before the fix, each in
    a round of the three). The failed init closes its producer: in each round the next attempt commits its
    chunks, and the records are there."""
    import uuid

    from confluent_kafka import Consumer

    from airflow_kafka_retry.engine.kafka.clients import consumer_config

    bootstrap = own_broker.bootstrap
    config = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": 10000}
    consumer = Consumer(consumer_config(config, f"fence-{uuid.uuid4().hex[:8]}"))
    try:
        for _ in range(3):
            fence_round(own_broker, config, consumer)
    finally:
        consumer.close()


def test_a_log_topic_not_created_in_time_is_the_clusters_failure(own_broker, monkeypatch):
    """Issue 48 item 8: ``ensure_log_topic`` raised a bare ``TimeoutError`` (or an error with no mark) when
    the cluster did not answer the creation in time, and a partition run counted it as the input's failure
    (never retried). Here the broker is frozen as the topic is asked for: the error names the topic and is
    the cluster's, so the supervisor tries the partition again."""
    import uuid

    from airflow_kafka_retry.engine.drain.supervisor import broker_transient
    from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
    from airflow_kafka_retry.engine.logs import log_topic as topics

    class FreezingAdmin(topics.AdminClient):
        def create_topics(self, *args, **kwargs):
            os.killpg(own_broker.pid, signal.SIGSTOP)
            return super().create_topics(*args, **kwargs)

    monkeypatch.setattr(topics, "AdminClient", FreezingAdmin)
    name = f"log-{uuid.uuid4().hex[:12]}"
    try:
        with pytest.raises(Exception) as raised:  # noqa: PT011 - its type is what is checked
            topics.ensure_log_topic(
                {"bootstrap.servers": own_broker.bootstrap}, name, what="the test log", config={}, timeout=2.0
            )
    finally:
        os.killpg(own_broker.pid, signal.SIGCONT)
    assert isinstance(raised.value, KafkaConfigError), repr(raised.value)
    assert f"cannot create the test log {name}" in str(raised.value)
    assert broker_transient(raised.value), repr(raised.value)


def test_the_parking_topics_metadata_asked_of_a_frozen_broker_is_retried_not_reported_missing(
    own_broker, tmp_path, monkeypatch
):
    """Issue 48 item 8: when a chunk must park a record, the parking topic's metadata was asked outside the
    engine's call deadlines (librdkafka's 10 s, whatever ``call_timeout_s``), and a request that failed was
    reported as "parking topic ... does not exist" (never retried). Here the broker freezes as that request
    is made: the request is bound by ``call_timeout_s`` (1 s), its failure is the cluster's, the partition
    is tried again, and once the broker answers the missing topic is named as before."""
    from confluent_kafka import Producer

    from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
    from airflow_kafka_retry.engine.drain import parking_check as parking_module
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics

    bootstrap = own_broker.bootstrap
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = ledger.make_fault_topology("park-freeze", attempts=2)
    create_topics(bootstrap, [t.topic for t in (*topology.tiers, *topology.dlt_tiers)])  # no parking topic
    config = {"bootstrap.servers": bootstrap}
    options = DrainOptions(handler="tests.support.fault_handler:indexed", call_timeout_s=1.0)
    producer = Producer(config)
    producer.produce(
        topology.topic,
        key=b"1",
        value=b"{}",
        headers=[(ledger.FAULT_ID, b"1"), (ledger.FAULT_MODE, b"fatal")],
    )
    assert producer.flush(10) == 0
    assert run_local(topology, topology.tier(0), config, options).ok
    assert replay_dlt(topology, config, ReplayRequest(to="main")).moved == 1  # fatal again: to be parked

    real, frozen = parking_module.partition_counts, []

    def partition_counts(client, topics, timeout=10.0):
        if topics == [topology.parking_topic] and not frozen:
            os.killpg(own_broker.pid, signal.SIGSTOP)
            frozen.append(threading.Timer(4.0, os.killpg, (own_broker.pid, signal.SIGCONT)))
            frozen[0].start()
        return real(client, topics, timeout)

    monkeypatch.setattr(parking_module, "partition_counts", partition_counts)
    try:
        [outcome] = run_local(topology, topology.tier(0), config, options, in_process=True).partitions
    finally:
        os.killpg(own_broker.pid, signal.SIGCONT)
    assert frozen, "the parking topic's metadata was never asked"
    assert outcome.status == "failed"
    assert outcome.retries >= 1, outcome.to_dict()
    assert "cannot read metadata of topic" in outcome.retry_errors[0], outcome.retry_errors
    assert (outcome.error or "").startswith(
        f"ParkingTopicMissingError: parking topic '{topology.parking_topic}' does not exist"
    ), outcome.error


def test_the_replay_log_check_asks_the_frozen_broker_under_the_attempts_deadlines(own_broker):
    """Issue 48 item 8: the replay log's end and its read were asked outside the partition attempt's
    deadlines (the supervisor could not see them, let alone abandon them). On a frozen broker the request
    in progress is the attempt's watched call, naming the replay log."""
    import time

    from airflow_kafka_retry.engine.drain.replay_trust import ReplayLogCheck
    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit

    watch = CallDeadlines("orders[0]")
    check = ReplayLogCheck({"bootstrap.servers": own_broker.bootstrap}, deadlines=watch, timeout_s=3.0)
    audit = ReplayAudit("replay-1", "orders-dlt", 0, 7, 0)
    answers: list[bool] = []
    seen = []
    os.killpg(own_broker.pid, signal.SIGSTOP)
    try:
        thread = threading.Thread(target=lambda: answers.append(check(audit, "digest")), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline and not seen:
            waiting = watch.waiting
            if waiting is not None:
                seen.append(waiting)
            time.sleep(0.05)
    finally:
        os.killpg(own_broker.pid, signal.SIGCONT)
    thread.join(60)
    check.close()
    assert seen, "the replay log was asked outside the attempt's deadlines"
    assert "orders-dlt-replay-log[0] (a replay log)" in seen[0].waits_for, seen[0]
    assert answers == [False]  # nothing confirms a replay the log could not be read for


REPLAY_FREEZE_S = 5.0


@pytest.mark.fault_case(
    "23",
    f"the broker (one node) SIGSTOPped for {REPLAY_FREEZE_S:g}s while a DLT replay at 50/s (chunks of 10) "
    "runs; `dlt replay-stop --wait 30` asked during the freeze",
)
def test_a_replay_stopped_while_its_broker_is_down_stops_cleanly_and_resumes_once(
    own_broker, tmp_path, capsys, fault_result
):
    """Case 23 (issue 51): the broker is frozen (SIGCONT ``REPLAY_FREEZE_S`` later) while a replay at 50/s
    runs in a thread; ``dlt replay-stop --wait`` is run during the freeze. The stop request waits for the
    broker (it is written within ``STOP_TIMEOUT_S``), the replay honours it at a chunk boundary once the
    broker is back, its status says ``stopped`` and how many moved, nothing is half-moved, and the same
    replay id then moves each of the rest once (``read_committed``)."""
    assert REPLAY_FREEZE_S < STOP_TIMEOUT_S  # the request waits for the broker rather than failing
    bootstrap = own_broker.bootstrap
    topology, config = _fill(bootstrap, tmp_path, "stop-down")
    request = ReplayRequest(to="main")
    first = Replay(topology, config, request, replay_id="down-1", rate="50/s", chunk_size=10)
    thread, out = _in_thread(first)
    _wait_for_moves(ReplayStatusView(topology, config), "down-1", thread)

    os.killpg(own_broker.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    thaw = threading.Timer(REPLAY_FREEZE_S, os.killpg, (own_broker.pid, signal.SIGCONT))
    thaw.start()
    try:
        code = main(
            ["dlt", "replay-stop", "--topology", str(tmp_path / "topology.yaml"), "--replay-id", "down-1"]
            + ["--reason", "broker down", "--wait", "30", "--json", "--bootstrap", bootstrap]
        )
        answered = time.monotonic() - frozen_at
        thread.join(60)
    finally:
        thaw.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(own_broker.pid, signal.SIGCONT)
    assert code == 0, capsys.readouterr().err
    stopped = json.loads(capsys.readouterr().out)
    assert not thread.is_alive(), "the replay did not end"
    assert "summary" in out, out.get("error")
    summary = out["summary"]
    assert (summary.status, stopped["state"]) == ("stopped", "stopped"), stopped
    assert "broker down" in stopped["reason"]
    moved = summary.moved
    assert 0 < moved < COUNT
    assert moved % first.chunk_size == 0, "a stop ends the replay at a chunk boundary"
    assert (stopped["moved"], stopped["remaining"]) == (moved, COUNT - moved)
    assert sum(_copies(bootstrap, topology.topic).values()) == moved, "nothing half-moved"

    rest = Replay(topology, config, request, replay_id="down-1", chunk_size=100).run()
    assert (rest.status, rest.moved_before, rest.moved) == ("ok", moved, COUNT - moved)
    copies = _copies(bootstrap, topology.topic)
    assert copies == Counter(str(i) for i in range(COUNT)), "lost or duplicated records"
    (done,) = ReplayStatusView(topology, config).read("down-1")
    assert (done["state"], done["moved"], done["remaining"]) == ("done", COUNT, 0)

    retried = f"{first.retries} attempt(s) tried again" if first.retries else "no attempt tried again"
    fault_result(
        "the stop request was written once the broker was back; "
        f"`replay-stop` answered {answered:.1f}s after the freeze: "
        f"stopped at a chunk boundary after {moved} move(s) ({retried}), "
        f"its status said stopped, moved {moved}, remaining {COUNT - moved}; "
        f"the same replay id moved the other {COUNT - moved} once",
        Account(COUNT, 0, COUNT, 0, {}, 0),
    )
