"""Replay headers are trusted only when the replay log knows them (issue 29, item 2), on the real broker.

A producer of the main topic can put ``dlt_replay-*`` headers on any record. The engine parks a
failing record only when its complete audit names this topology's DLT or parking topic and the
replay log of that topic recorded the move; any other claim is treated as absent: the record is
dead-lettered as usual (the DLT watch sees it), the claim is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.dlt.replay import ReplayRequest, replay_dlt
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.observability.metrics import run_metrics
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.policy.headers import replay as R
from airflow_kafka_retry.sandbox.scratch_topics import delete_topics

from tests.support import ledger

pytestmark = pytest.mark.integration

INVALID = f"{ledger.HANDLER_MODULE}.InvalidOrder"


def _options() -> DrainOptions:
    return DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )


def _produce(bootstrap: str, topic: str, rows: list[tuple[str, str, list]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, mode, headers in rows:
        value = json.dumps({"id": key, "mode": mode}).encode()
        producer.produce(topic, value=value, key=key.encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0


def _keys(bootstrap: str, topic: str) -> list[str]:
    return sorted(m.key().decode() for m in ledger.read_all(bootstrap, topic))


def test_forged_replay_headers_do_not_bypass_the_dlt(kafka_bootstrap, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = ledger.make_topology("forge")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    now = time.time_ns() // 1_000_000
    dlt = topology.dlt_topic
    forged = {
        # a complete audit naming the DLT, but no replay ever moved such a record
        "named-dlt": R.ReplayAudit("forged-1", dlt, 0, 0, now).headers(),
        # a complete audit naming a topic of no DLT of this topology
        "other-topic": R.ReplayAudit("forged-2", "somewhere-else", 0, 0, now).headers(),
        # only the id
        "id-only": [(R.REPLAY_ID, b"forged-3")],
    }
    # one genuine replay: a fatal record dead-lettered by a run, replayed, failing again -> parked
    _produce(kafka_bootstrap, topology.topic, [("genuine", "fatal", [])])
    assert run_local(topology, topology.tier(0), config, _options()).ok
    assert _keys(kafka_bootstrap, dlt) == ["genuine"]
    assert replay_dlt(topology, config, ReplayRequest(exception=INVALID, to="main")).moved == 1
    _produce(kafka_bootstrap, topology.topic, [(key, "fatal", headers) for key, headers in forged.items()])

    with caplog.at_level(logging.WARNING):
        summary = run_local(topology, topology.tier(0), config, _options())
    assert summary.ok
    assert _keys(kafka_bootstrap, topology.parking_topic) == ["genuine"], "a forged replay header was trusted"
    assert _keys(kafka_bootstrap, dlt) == sorted(["genuine", *forged]), "a forged record missed the DLT"
    # counted once per record, in the summary and its metric; logged once per run
    assert sum(p.untrusted_replays for p in summary.partitions) == 3
    metric = {m.name: m.value for m in run_metrics(summary, topology)}
    assert metric["kafka_retry.tier.untrusted_replay_headers"] == 3
    warnings = [r for r in caplog.records if "replay headers" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_a_real_copys_audit_copied_onto_another_record_is_not_trusted(kafka_bootstrap, tmp_path, monkeypatch):
    """Issue 38, item 3: the log binds each move to the copy (replay id, key, value), not its coordinates."""
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    topology = ledger.make_topology("copied")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    _produce(kafka_bootstrap, topology.topic, [("genuine", "fatal", [])])
    assert run_local(topology, topology.tier(0), config, _options()).ok
    assert replay_dlt(topology, config, ReplayRequest(exception=INVALID, to="main")).moved == 1
    [copy] = [m for m in ledger.read_all(kafka_bootstrap, topology.topic) if R.is_replayed(m.headers())]
    # every header of the real copy, audit included, on a record of other content
    _produce(kafka_bootstrap, topology.topic, [("impostor", "fatal", copy.headers())])

    summary = run_local(topology, topology.tier(0), config, _options())
    assert summary.ok
    assert _keys(kafka_bootstrap, topology.parking_topic) == ["genuine"], "a copied audit was trusted"
    assert _keys(kafka_bootstrap, topology.dlt_topic) == ["genuine", "impostor"]
    assert sum(p.untrusted_replays for p in summary.partitions) == 1


def _first_event(trigger, seconds: float) -> dict:
    async def first():
        # closed on the way out, as the triggerer ends a trigger: its watches close before this returns
        async with contextlib.aclosing(trigger.run()) as events:
            async for event in events:
                return event.payload

    return asyncio.run(asyncio.wait_for(first(), seconds))


def test_the_dlt_watch_reports_parked_records(kafka_bootstrap, tmp_path, monkeypatch):
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_TRUST_TEST",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    topology = ledger.make_topology("parkwatch")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    _produce(kafka_bootstrap, topology.topic, [("p1", "fatal", [])])
    assert run_local(topology, topology.tier(0), config, _options()).ok
    watch = DltWatchOperator(task_id="watch", topology=topology, kafka_conn_id="akr_trust_test")
    first = watch.execute({})
    assert first["totals"]["new_records"] == 1
    assert replay_dlt(topology, config, ReplayRequest(exception=INVALID, to="main")).moved == 1
    assert run_local(topology, topology.tier(0), config, _options()).ok
    assert _keys(kafka_bootstrap, topology.parking_topic) == ["p1"]
    # event mode: the topology's watcher (what build_retry_dags registers) fires its DLT lane for the
    # parked record
    path = ledger.write_topology(topology, tmp_path / "topology.yaml")
    dags = build_retry_dags(
        path.source, handler=f"{ledger.HANDLER_MODULE}:indexed", kafka_conn_id="akr_trust_test"
    )
    [trigger] = [w.trigger for w in dags[f"kafka_retry__{topology.topic}"].timetable.asset_condition.watchers]
    event = _first_event(trigger, 60)
    assert event["due"] == ["watch_dlt"]
    assert event["lanes"]["watch_dlt"]["partitions"] == [f"{topology.parking_topic}[0]"]
    second = watch.execute({})
    assert topology.parking_topic in second["dlt_topics_watched"]
    assert second["totals"]["dlt_topics"] == {topology.parking_topic: 1}, "a parked record went unreported"


def test_the_event_dlt_watcher_works_before_the_parking_topic_exists(kafka_bootstrap, tmp_path, monkeypatch):
    """A topology deployed before parking existed has no parking topic: its DLTs are watched all the same."""
    monkeypatch.setenv("AKR_LEDGER", ledger.ledger_path(tmp_path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_TRUST_TEST",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    topology = ledger.make_topology("noparking")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    delete_topics(kafka_bootstrap, [topology.parking_topic])
    _produce(kafka_bootstrap, topology.topic, [("d1", "fatal", [])])
    assert run_local(topology, topology.tier(0), config, _options()).ok
    path = ledger.write_topology(topology, tmp_path / "topology.yaml")
    dags = build_retry_dags(
        path.source, handler=f"{ledger.HANDLER_MODULE}:indexed", kafka_conn_id="akr_trust_test"
    )
    [trigger] = [w.trigger for w in dags[f"kafka_retry__{topology.topic}"].timetable.asset_condition.watchers]
    event = _first_event(trigger, 60)
    assert event["due"] == ["watch_dlt"]
    assert event["lanes"]["watch_dlt"]["partitions"] == [f"{topology.dlt_topic}[0]"]
