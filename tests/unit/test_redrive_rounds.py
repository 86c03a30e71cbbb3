"""
A redrive round's rules (issue 51, part 3): replay ids, ticks, the redrive count, and each record's fate.

The count comes from the replay logs: a claim counts only when the log of the topic it names recorded that
move of that very copy (replay id, key, value), so headers alone can neither raise nor reset it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.redrive import RoundSelector
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, record_key
from airflow_kafka_retry.policy.headers.replay import ReplayAudit, copy_digest
from airflow_kafka_retry.policy.redrive.rounds import (
    RoundRules,
    due,
    park_id,
    redrive_count,
    round_id,
    same_tick,
)

TICK = int(datetime(2026, 11, 23, 10, 0, tzinfo=UTC).timestamp() * 1000)
HOUR = 3_600_000
DLT, PARKING = "orders-dlt", "orders-parking"
SOURCES = (DLT, PARKING)
KEY, VALUE = b"k-1", b'{"id": 1}'


def _logs(*entries: tuple[str, int, int, dict]) -> dict[str, ReplayLog]:
    logs = {topic: ReplayLog(f"{topic}-replay-log") for topic in SOURCES}
    for topic, partition, offset, entry in entries:
        logs[topic].add(record_key(partition, offset), encode_entry(entry))
    return logs


def _moved(replay_id: str, **extra: object) -> dict:
    """A log entry of the move of the copy (``KEY``, ``VALUE``) by ``replay_id``."""
    return {"replay_id": replay_id, "copy": copy_digest(replay_id, KEY, VALUE), **extra}


def _record(topic: str, offset: int, claim: ReplayAudit | None, key: bytes = KEY) -> DltRecord:
    return DltRecord(topic, 0, offset, TICK - HOUR, key, VALUE, tuple(claim.headers() if claim else ()))


def _count(record: DltRecord, logs: dict[str, ReplayLog]) -> tuple[int, str | None]:
    return redrive_count(
        record.headers,
        record.key,
        record.value,
        sources=SOURCES,
        entry_of=lambda topic, p, o: logs[topic].moved.get((p, o)) if topic in logs else None,
    )


def test_round_ids_name_the_policy_and_the_tick():
    rid = round_id("timeouts", TICK)
    assert rid == "redrive.20261123T100000Z.timeouts"
    assert park_id(rid) == "redrive.20261123T100000Z.timeouts.park"
    assert same_tick(rid, TICK)
    assert same_tick(park_id(rid), TICK)
    assert same_tick(round_id("other-policy", TICK), TICK)
    assert not same_tick(round_id("timeouts", TICK + HOUR), TICK)
    assert not same_tick("fix-1", TICK)


def test_a_policy_has_a_round_once_per_every_whatever_the_dag_s_tick():
    period = 30 * 60_000  # the DAG ticks every 30 min: policies of 1 h and 90 min share it
    ticks = [TICK + 7_000 + i * period for i in range(12)]  # six hours, ticks not on the hour
    assert sum(due(HOUR, t, period) for t in ticks) == 6
    assert sum(due(90 * 60_000, t, period) for t in ticks) == 4
    assert all(due(period, t, period) for t in ticks)


def test_the_count_is_read_from_the_log_never_from_the_headers_alone():
    first = ReplayAudit(round_id("p", TICK - 2 * HOUR), DLT, 0, 5, TICK)
    again = ReplayAudit(round_id("p", TICK - HOUR), PARKING, 0, 9, TICK)
    logs = _logs(
        (DLT, 0, 5, _moved(first.replay_id, redrives=1)), (PARKING, 0, 9, _moved(again.replay_id, redrives=2))
    )
    assert _count(_record(DLT, 1, None), logs) == (0, None)  # a first failure
    assert _count(_record(PARKING, 3, first), logs) == (1, first.replay_id)
    assert _count(_record(PARKING, 4, again), logs) == (2, again.replay_id)
    # a claim the log does not confirm counts nothing: another record's key, a forged id, another topic
    assert _count(_record(PARKING, 4, again, key=b"other"), logs) == (0, None)
    assert _count(_record(PARKING, 4, ReplayAudit("forged", PARKING, 0, 9, TICK)), logs) == (0, None)
    assert _count(_record(PARKING, 4, ReplayAudit(again.replay_id, "elsewhere", 0, 9, TICK)), logs) == (
        0,
        None,
    )
    # a move by hand (no count in its entry) counts once; an entry from before the digest confirms nothing
    by_hand = ReplayAudit("fix-1", DLT, 0, 7, TICK)
    logs = _logs((DLT, 0, 7, _moved("fix-1")), (DLT, 0, 8, {"replay_id": "old"}))
    assert _count(_record(PARKING, 5, by_hand), logs) == (1, "fix-1")
    assert _count(_record(PARKING, 6, ReplayAudit("old", DLT, 0, 8, TICK)), logs) == (0, None)


def test_each_record_s_fate_in_a_round():
    rules = RoundRules(max_redrives=2, tick_ms=TICK)
    assert rules.decide(0, None) == "redrive"
    assert rules.decide(1, round_id("p", TICK - HOUR)) == "redrive"
    assert rules.decide(2, round_id("p", TICK - HOUR)) == "park"
    assert rules.decide(5, "fix-1") == "park"
    # a copy this tick moved (this policy's round or another's) waits for the next round, whatever its count
    assert rules.decide(0, round_id("p", TICK)) == "later"
    assert rules.decide(9, park_id(round_id("q", TICK))) == "later"
    assert RoundRules.log_fields("redrive", 1, "p") == {"redrives": 2, "policy": "p"}
    assert RoundRules.log_fields("park", 2, "p") == {"redrives": 2, "parked": True, "policy": "p"}


def test_a_pass_takes_only_the_records_of_its_action_and_decides_each_once():
    earlier = ReplayAudit(round_id("p", TICK - HOUR), DLT, 0, 5, TICK)
    now = ReplayAudit(round_id("p", TICK), DLT, 0, 6, TICK)
    logs = _logs(
        (DLT, 0, 5, _moved(earlier.replay_id, redrives=2)), (DLT, 0, 6, _moved(now.replay_id, redrives=1))
    )
    fresh, spent, this_tick = _record(DLT, 10, None), _record(DLT, 11, earlier), _record(DLT, 12, now)
    redrive = RoundSelector(RoundRules(2, TICK), "p", SOURCES, logs, "redrive")
    assert [redrive.keep(r) for r in (fresh, spent, this_tick)] == [True, False, False]
    assert redrive.keep(fresh)  # asked again when moved: the same answer
    assert len(redrive.decided) == 3
    assert redrive.tally() == {"redrive": 1, "park": 1, "later": 1}
    assert redrive.log_fields(fresh) == {"redrives": 1, "policy": "p"}
    park = RoundSelector(RoundRules(2, TICK), "p", SOURCES, logs, "park", keeps_failure=True)
    assert [park.keep(r) for r in (fresh, spent, this_tick)] == [False, True, False]
    assert park.log_fields(spent) == {"redrives": 2, "parked": True, "policy": "p"}
