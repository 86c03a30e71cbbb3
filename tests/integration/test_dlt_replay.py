"""DLT inspect and replay on the embedded broker, with the DLT filled by real tier runs of the local
engine."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from airflow_kafka_retry.dlt.inspect import inspect_dlt
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.engine.logs.replay_log import log_topic
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers import codec as H, replay as R

from tests.support import ledger

pytestmark = [pytest.mark.integration]

COUNT = 70  # 10 records per ledger mode
PARTITIONS = 2
PERMANENT = f"{ledger.HANDLER_MODULE}.PermanentError"
INVALID = f"{ledger.HANDLER_MODULE}.InvalidOrder"
DESERIALIZATION = "airflow_kafka_retry.errors.DeserializationError"
TRANSFORMS = "tests.support.dlt_transforms"


def _options() -> DrainOptions:
    return DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )


def fill_dlt(bootstrap: str, tmp_path, prefix: str = "dlt"):
    """A ledger topology whose tiers ran once: the DLT holds the permanent, fatal and bad-json records."""
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology(prefix)
    inputs = ledger.produce_inputs(bootstrap, topology, COUNT, PARTITIONS)
    config = {"bootstrap.servers": bootstrap}
    ledger.run_tiers(topology, lambda tier: run_local(topology, tier, config, _options()))
    return topology, inputs, ledger_file, config


def ids_of(inputs, mode: str, partition: int | None = None) -> set[str]:
    return {
        i for i, (m, p, _) in inputs.records.items() if m == mode and (partition is None or p == partition)
    }


def replayed_copies(bootstrap: str, topic: str) -> list:
    return [m for m in ledger.read_all(bootstrap, topic) if R.is_replayed(m.headers())]


@pytest.fixture(scope="module")
def filled_once(kafka_bootstrap, tmp_path_factory):
    """One filled DLT shared by tests that must leave it untouched."""
    return fill_dlt(kafka_bootstrap, tmp_path_factory.mktemp("filled"), "bad")


def test_inspect_groups_a_dlt_filled_by_tier_runs(filled_once):
    topology, inputs, _, config = filled_once  # inspecting moves nothing: the shared DLT stays untouched
    report = inspect_dlt(topology, config)
    assert report["topic"] == topology.dlt_topic
    assert report["records"] == 30
    assert report["replayed"] == 0
    by_exception = Counter()
    for group in report["groups"]:
        assert group["original_topic"] == topology.topic
        assert group["oldest"] <= group["newest"]
        assert group["bucket"].endswith(":00Z")
        assert 1 <= len(group["samples"]) <= 3
        assert all(not {"key", "value"} & set(s) for s in group["samples"]), "payloads shown without asking"
        by_exception[group["exception"]] += group["count"]
    assert by_exception == {PERMANENT: 10, INVALID: 10, DESERIALIZATION: 10}
    assert sum(report["partitions"].values()) == 30
    assert set(report["partitions"]) == set(range(PARTITIONS))

    shown = inspect_dlt(topology, config, bucket="day", samples=1, show_values=True)
    assert all(len(g["samples"]) == 1 and "value" in g["samples"][0] for g in shown["groups"])
    values = [s["value"] for g in shown["groups"] for s in g["samples"]]
    assert "{not json" in values
    assert any('"mode": "permanent"' in v for v in values)
    assert inspect_dlt(topology, config, dlt="parking")["records"] == 0


def test_filtered_replay_with_transform_moves_exactly_the_selection_once(kafka_bootstrap, tmp_path):
    topology, inputs, ledger_file, config = fill_dlt(kafka_bootstrap, tmp_path)
    dlt_before = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    request = ReplayRequest(
        exception=PERMANENT, partition="0", transform=f"{TRANSFORMS}:fix_even_leave_out_odd"
    )

    dry = replay_dlt(topology, config, request, dry_run=True)
    wanted = {i for i in ids_of(inputs, "permanent", 0) if int(i) % 2 == 0}
    assert dry.dry_run
    assert dry.moved == 0
    assert dry.selected == len(wanted) == len(dry.moves) > 0
    assert {m.target for m in dry.moves} == {topology.topic}
    assert all(m.transformed for m in dry.moves)
    assert dry.left_out == len(ids_of(inputs, "permanent", 0)) - len(wanted)
    assert replayed_copies(kafka_bootstrap, topology.topic) == [], "a dry run moved records"

    summary = replay_dlt(topology, config, request, replay_id="fix-1")
    assert (summary.replay_id, summary.moved, summary.selected) == ("fix-1", len(wanted), len(wanted))
    assert [(m.partition, m.offset) for m in summary.moves] == [(m.partition, m.offset) for m in dry.moves]
    copies = replayed_copies(kafka_bootstrap, topology.topic)
    assert sorted(m.key().decode() for m in copies) == sorted(wanted), "not exactly the selected records"
    dlt_by_key = {m.key(): m for m in dlt_before}
    for copy in copies:
        source = dlt_by_key[copy.key()]
        mode, partition, offset = inputs.records[copy.key().decode()]
        audit = R.read_replay_audit(copy.headers())
        assert (audit.replay_id, audit.topic, audit.partition, audit.offset) == (
            "fix-1",
            topology.dlt_topic,
            source.partition(),
            source.offset(),
        )
        assert summary.started_ms <= audit.timestamp_ms <= summary.finished_ms
        assert H.last_header(copy.headers(), H.ATTEMPTS) is None
        assert H.read_attempts(copy.headers()) == 1
        assert H.last_header(copy.headers(), H.RETRY_TOPIC_NAMES.exception_fqcn) is None
        coords = H.read_original_coordinates(copy.headers())
        assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset)
        assert H.last_header(copy.headers(), "trace-id") == f"t{copy.key().decode()}".encode()
        assert H.last_header(copy.headers(), "fixed-by") == b"dlt-test"
        assert json.loads(copy.value())["mode"] == "ok"
        assert copy.partition() == partition
    # the rest stay: the DLT is unchanged and the log holds exactly the moved coordinates
    assert len(ledger.read_all(kafka_bootstrap, topology.dlt_topic)) == len(dlt_before)
    report = inspect_dlt(topology, config)
    assert report["replayed"] == len(wanted)
    log_keys = [m.key().decode() for m in ledger.read_all(kafka_bootstrap, log_topic(topology.dlt_topic))]
    assert sorted(k for k in log_keys if k.startswith("record/")) == sorted(
        f"record/{dlt_by_key[m.key()].partition()}/{dlt_by_key[m.key()].offset()}" for m in copies
    )
    assert {"plan/fix-1", "done/fix-1"} <= set(log_keys)

    # the fixed records now succeed on the main topic
    assert run_local(topology, topology.tier(0), config, _options()).ok
    assert {i for i in ledger.processed_ids(ledger_file) if i in wanted} == wanted

    # a second replay with overlapping filters moves only what the first did not
    second = replay_dlt(topology, config, ReplayRequest(exception=PERMANENT, transform=f"{TRANSFORMS}:fix"))
    assert second.already_replayed == len(wanted)
    assert second.moved == len(ids_of(inputs, "permanent")) - len(wanted)
    # a third, with no filter at all, moves every record not replayed yet, and nothing twice
    third = replay_dlt(topology, config, ReplayRequest(transform=f"{TRANSFORMS}:fix"))
    assert third.already_replayed == len(ids_of(inputs, "permanent"))
    assert third.moved == 20
    assert replay_dlt(topology, config, ReplayRequest()).moved == 0
    keys = Counter(m.key().decode() for m in replayed_copies(kafka_bootstrap, topology.topic))
    assert set(keys) == ids_of(inputs, "permanent") | ids_of(inputs, "fatal") | ids_of(inputs, "bad-json")
    assert set(keys.values()) == {1}, "a record was replayed twice"


def test_a_replayed_record_that_fails_again_is_parked_not_dead_lettered(kafka_bootstrap, tmp_path):
    topology, inputs, ledger_file, config = fill_dlt(kafka_bootstrap, tmp_path, "park")
    dlt_count = len(ledger.read_all(kafka_bootstrap, topology.dlt_topic))
    # the fatal records go back unchanged to the main topic; the permanent ones to the first retry tier
    fatal = replay_dlt(topology, config, ReplayRequest(exception=INVALID, to="main"))
    permanent = replay_dlt(topology, config, ReplayRequest(exception=PERMANENT, to="first-tier"))
    assert fatal.moved == permanent.moved == 10
    tier1 = replayed_copies(kafka_bootstrap, topology.tier(1).topic)
    assert len(tier1) == 10, "not the tier's first attempt"
    assert all(H.read_attempts(m.headers()) == 2 for m in tier1), "not the tier's first attempt"
    for tier in topology.tiers:
        summary = run_local(topology, tier, config, _options())
        assert summary.ok
    parked = ledger.read_all(kafka_bootstrap, topology.parking_topic)
    assert sorted(m.key().decode() for m in parked) == sorted(
        ids_of(inputs, "fatal") | ids_of(inputs, "permanent")
    )
    assert len(ledger.read_all(kafka_bootstrap, topology.dlt_topic)) == dlt_count, (
        "a replayed record was dead-lettered"
    )
    for message in parked:
        mode, partition, offset = inputs.records[message.key().decode()]
        audit = DltRecord.from_message(message).replay  # what a transform replaying from parking sees
        assert audit.replay_id == (fatal.replay_id if mode == "fatal" else permanent.replay_id)
        assert audit.topic == topology.dlt_topic
        coords = H.read_original_coordinates(message.headers())
        assert (coords.topic, coords.partition, coords.offset) == (topology.topic, partition, offset)
        expected = INVALID if mode == "fatal" else PERMANENT
        assert H.last_header(message.headers(), H.RETRY_TOPIC_NAMES.exception_fqcn).decode() == expected
    report = inspect_dlt(topology, config, dlt="parking")
    assert report["topic"] == topology.parking_topic
    assert report["records"] == 20
    assert {g["exception"] for g in report["groups"]} == {INVALID, PERMANENT}

    # the next fix is out: replay from the parking topic; the records now succeed
    again = replay_dlt(topology, config, ReplayRequest(dlt="parking", transform=f"{TRANSFORMS}:fix"))
    assert again.moved == 20
    assert again.dlt == topology.parking_topic
    assert run_local(topology, topology.tier(0), config, _options()).ok
    processed = ledger.processed_ids(ledger_file)
    assert ids_of(inputs, "fatal") | ids_of(inputs, "permanent") <= set(processed)
    assert len(ledger.read_all(kafka_bootstrap, topology.parking_topic)) == 20, (
        "a fixed record was parked again"
    )


def test_limit_key_and_offsets_select_records(kafka_bootstrap, tmp_path):
    topology, inputs, _, config = fill_dlt(kafka_bootstrap, tmp_path, "select")
    dlt = sorted(
        ledger.read_all(kafka_bootstrap, topology.dlt_topic),
        key=lambda m: (m.timestamp()[1], m.partition(), m.offset()),
    )
    oldest = [m.key().decode() for m in dlt if m.key().decode() in ids_of(inputs, "permanent")][:3]
    first = replay_dlt(topology, config, ReplayRequest(exception=PERMANENT, limit=3))
    assert (first.moved, first.beyond_limit) == (3, 7)
    assert sorted(m.key().decode() for m in replayed_copies(kafka_bootstrap, topology.topic)) == sorted(
        oldest
    )
    one = next(iter(ids_of(inputs, "fatal")))
    assert replay_dlt(topology, config, ReplayRequest(key=one)).moved == 1
    assert replay_dlt(topology, config, ReplayRequest(key=one)).already_replayed == 1
    span = replay_dlt(topology, config, ReplayRequest(partition=0, offsets="0-4"), dry_run=True)
    assert {(m.partition, m.offset) for m in span.moves} <= {(0, o) for o in range(5)}
    assert span.matched == 5
    assert span.selected == 5 - span.already_replayed


@pytest.mark.parametrize(
    ("request_kwargs", "message"),
    [
        ({"offsets": "5-3"}, "--offsets '5-3'"),
        ({"since": "yesterday-ish"}, "--since 'yesterday-ish' is not a time"),
        ({"exception": "not a class"}, "--exception 'not a class' is not a dotted exception class path"),
        ({"partition": "7"}, "--partition 7:"),
        ({"dlt": "no-such-dlt"}, "--dlt no-such-dlt: "),  # any DLQ by name: it must exist
        ({"to": "no-such-topic-anywhere"}, "--to 'no-such-topic-anywhere' is not a topic of"),
        ({"transform": f"{TRANSFORMS}:raise_on_second"}, "raised ValueError: cannot fix this one"),
        ({"transform": f"{TRANSFORMS}:wrong_type"}, "returned str; it must return the record"),
        ({"transform": f"{TRANSFORMS}:str_value"}, "returned a value of type str; it must be bytes or None"),
        ({"transform": f"{TRANSFORMS}:move_offset"}, "changed offset: the DLT coordinates cannot be edited"),
        ({"transform": f"{TRANSFORMS}:no_such_function"}, "has no attribute 'no_such_function'"),
    ],
)
def test_bad_input_moves_nothing_and_names_the_problem(kafka_bootstrap, filled_once, request_kwargs, message):
    topology, _, _, config = filled_once
    with pytest.raises(ReplayError) as info:
        replay_dlt(topology, config, ReplayRequest(**request_kwargs))
    assert message in str(info.value)
    if "transform" in request_kwargs and "no_such" not in request_kwargs["transform"]:
        assert f"{topology.dlt_topic}[" in str(info.value), "the record's coordinates are not named"
    assert replayed_copies(kafka_bootstrap, topology.topic) == []
    assert replayed_copies(kafka_bootstrap, topology.tier(1).topic) == []
    moved = (
        [
            m
            for m in ledger.read_all(kafka_bootstrap, log_topic(topology.dlt_topic))
            if m.key().startswith(b"record/")
        ]
        if _exists(kafka_bootstrap, log_topic(topology.dlt_topic))
        else []
    )
    assert moved == []


def _exists(bootstrap: str, topic: str) -> bool:
    from airflow_kafka_retry.sandbox.scratch_topics import admin_client

    return topic in admin_client(bootstrap).list_topics(timeout=10).topics


def _fence_a_running_replay(bootstrap: str, tmp_path, prefix: str) -> Counter:
    """Replay A stops in its move step (a transaction open); replay B of the same DLT runs meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    from airflow_kafka_retry.dlt.errors import ReplayAbortedError

    from tests.support import dlt_transforms

    dlt_transforms.GATE.clear()
    dlt_transforms.BLOCKED.clear()
    dlt_transforms._calls.clear()
    topology, _, _, config = fill_dlt(bootstrap, tmp_path, prefix)
    dlt_keys = sorted(m.key().decode() for m in ledger.read_all(bootstrap, topology.dlt_topic))
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(
            replay_dlt,
            topology,
            config,
            ReplayRequest(transform=f"{TRANSFORMS}:gated"),
            replay_id="first",
            chunk_size=2,
        )
        assert dlt_transforms.BLOCKED.wait(60), "the first replay never reached its move step"
        try:
            second = replay_dlt(topology, config, ReplayRequest(), replay_id="second")
        finally:
            dlt_transforms.GATE.set()
        with pytest.raises(ReplayAbortedError):  # fenced: B's producer took over the DLT's transactional id
            first.result(120)
    assert second.already_replayed >= 4
    assert second.moved == len(dlt_keys) - second.already_replayed
    entries = {}
    for message in ledger.read_all(bootstrap, log_topic(topology.dlt_topic)):
        if message.key().startswith(b"record/"):
            entries[message.key()] = json.loads(message.value())["replay_id"]
    assert len(entries) == len(dlt_keys)
    assert set(entries.values()) == {"first", "second"}
    copies = Counter(m.key().decode() for m in replayed_copies(bootstrap, topology.topic))
    assert sorted(copies) == dlt_keys, "a record was lost"
    return copies


def test_a_second_replay_fences_a_running_one_and_nothing_is_lost(
    kafka_bootstrap, tmp_path, broker_capabilities
):
    copies = _fence_a_running_replay(kafka_bootstrap, tmp_path, "fence")
    if broker_capabilities.abort_isolation:  # the fenced replay's transaction was aborted: no copies
        assert set(copies.values()) == {1}, copies


def test_an_original_topic_set_by_the_producer_is_never_a_default_target(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """Spring keeps a ``kafka_original-topic`` the producer set (so do the tiers); the replay refuses to
    follow it."""
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = ledger.make_fault_topology("forged", attempts=2)
    victim = unique_topic("victim")
    create_topics(kafka_bootstrap, [victim])
    forged_header = [(H.RETRY_TOPIC_NAMES.original_topic, victim.encode())]
    ledger.produce_fault_inputs(
        kafka_bootstrap,
        topology,
        [ledger.FaultInput(mode="fatal", headers=forged_header), ledger.FaultInput(mode="fatal")],
        1,
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    assert run_local(
        topology, topology.tier(0), config, DrainOptions(handler="tests.support.fault_handler:indexed")
    ).ok
    dead = ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    origins = sorted(H.read_original_coordinates(m.headers()).topic for m in dead)
    assert origins == sorted([victim, topology.topic]), (
        "the tiers no longer keep an original topic as Spring does"
    )

    with pytest.raises(
        ReplayError,
        match=rf"the original topic of {topology.dlt_topic}\[0\]@\d+ '{victim}' is not a "
        rf"topic of .*allowed_targets",
    ):
        replay_dlt(topology, config, ReplayRequest(), dry_run=True)
    with pytest.raises(ReplayError, match=f"'{victim}' is not a topic of"):
        replay_dlt(topology, config, ReplayRequest())
    assert ledger.read_all(kafka_bootstrap, victim) == [], "a record was replayed where its producer chose"
    assert replayed_copies(kafka_bootstrap, topology.topic) == []

    # where the replay DAG's author allows that topic, the record goes back there
    summary = replay_dlt(topology, config, ReplayRequest(), allowed_targets=[victim])
    assert summary.moved == 2
    assert sorted(summary.targets) == sorted([victim, topology.topic])
    assert (
        len(replayed_copies(kafka_bootstrap, victim))
        == len(replayed_copies(kafka_bootstrap, topology.topic))
        == 1
    )
