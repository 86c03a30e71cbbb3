"""The pass lead: waits end a lead before the due time; the reader holds a record until it is due."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import TopicPartition

from airflow_kafka_retry.engine.drain import due_records
from airflow_kafka_retry.engine.drain.due_records import PartitionReader
from airflow_kafka_retry.engine.drain.follow import PASS_LEAD_MS, drain_following, wait_for_pass
from airflow_kafka_retry.policy.headers import codec as H

T = 1_700_000_000_000


class Clock:
    """Epoch ms that move only when the code sleeps."""

    def __init__(self, now: int = T) -> None:
        self.now, self.slept = now, []

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += round(seconds * 1000)


class FrozenClock(Clock):
    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


# ------------------------------------------------------------------ the waits
def test_a_wait_ends_the_lead_before_the_due_time_and_the_pass_covers_the_lead_after():
    clock = Clock()
    assert wait_for_pass(T + 5_000, clock=clock, sleep=clock.sleep) == T + 5_000 + PASS_LEAD_MS
    assert clock.now == T + 5_000 - PASS_LEAD_MS
    # started late: the pass drains what is due by now
    assert wait_for_pass(T, clock=clock, sleep=clock.sleep) == clock.now
    # no lead (the Spark operator's wait): until the due time, the cutoff then
    assert wait_for_pass(clock.now + 1_000, lead_ms=0, clock=clock, sleep=clock.sleep) == clock.now
    # a stop ends the wait at once
    stopped = Clock()
    cutoff = wait_for_pass(T + 60_000, should_stop=lambda: "killed", clock=stopped, sleep=stopped.sleep)
    assert stopped.slept == []
    assert cutoff == T  # not ahead of now: the pass never covers more than its hold


@dataclass
class Part:
    partition: int
    stop_reason: str
    next_due_ms: int | None = None


@dataclass
class Summary:
    partitions: list[Part]
    ok: bool = True
    stopped: str | None = None
    absorbed: list[Summary] = field(default_factory=list)

    def absorb(self, other: Summary) -> None:
        self.absorbed.append(other)
        self.partitions = other.partitions


def test_a_follow_pass_starts_the_lead_before_its_first_record_is_due():
    clock = Clock()
    passes: list[tuple[int, int]] = []  # (when it started, its cutoff)
    results = [
        Summary([Part(0, "not_due", T + 3_000), Part(1, "not_due", T + 2_000)]),
        Summary([Part(0, "not_due", T + 3_000), Part(1, "end")]),
        Summary([Part(0, "not_due", T + 90_000), Part(1, "end")]),
    ]

    def drain(cutoff_ms: int) -> Summary:
        passes.append((clock.now, cutoff_ms))
        return results[len(passes) - 1]

    summary = drain_following(drain, cutoff_ms=T, follow_ms=10_000, clock=clock, sleep=clock.sleep)
    lead = PASS_LEAD_MS
    assert passes == [(T, T), (T + 2_000 - lead, T + 2_000 + lead), (T + 3_000 - lead, T + 3_000 + lead)]
    assert len(summary.absorbed) == 2  # the record due in 90 s is left for a later run
    # with no lead, a pass starts when its record is due, with that cutoff (as before the lead)
    clock, passes[:] = Clock(), []
    drain_following(drain, cutoff_ms=T, follow_ms=1_000, clock=clock, sleep=clock.sleep, lead_ms=0)
    assert passes == [(T, T)]  # 2 s away: beyond follow


# ------------------------------------------------------------------ the reader's hold
class Message:
    def __init__(self, offset: int, due: int | None, *, raw: bytes | None = None) -> None:
        self._offset = offset
        self._headers = None
        if due is not None or raw is not None:
            stamp = raw if raw is not None else H.encode_big_integer(due)
            self._headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, stamp)]

    def headers(self):
        return self._headers

    def offset(self):
        return self._offset


def _reader(monkeypatch, messages, clock: Clock, *, cutoff: int, hold_ms: int = 2 * PASS_LEAD_MS):
    class Scan:
        def __init__(self, *args, **kwargs) -> None:
            self.high: dict = {}

        def records(self):
            return iter(messages)

    monkeypatch.setattr(due_records, "Scan", Scan)
    monkeypatch.setattr(
        due_records, "committed_offsets", lambda consumer, keys, *a, **k: [TopicPartition("t", 0, 0)]
    )
    return PartitionReader(
        object(), "t", 0, cutoff_ms=cutoff, hold_ms=hold_ms, clock=clock, sleep=clock.sleep
    )


def _read_all(reader: PartitionReader, clock: Clock, limit: int = 100) -> list[tuple[int, list[int], str]]:
    """Each read: (the clock when it returned, the offsets it handed on, why it stopped)."""
    reads = []
    while True:
        chunk = reader.read(limit)
        reads.append((clock.now, [m.offset() for m in chunk.messages], chunk.stop))
        for message, due in zip(chunk.messages, chunk.due_ms):
            assert due is None or due <= clock.now, f"offset {message.offset()} handed on before it was due"
        if chunk.stop != "limit":
            return reads


def test_a_record_in_the_pass_but_not_yet_due_is_held_until_due_after_what_is_due_went_on(monkeypatch):
    clock = Clock()
    messages = [
        Message(0, T - 60_000),
        Message(1, None),  # no due time (tier 0): never held
        Message(2, T + 100),
        Message(3, T + 105),  # due within the hold's gathering of offset 2: goes along
        Message(4, T + 300),
        Message(5, T + 600),  # after the cutoff: left
    ]
    reader = _reader(monkeypatch, messages, clock, cutoff=T + 400)
    reads = _read_all(reader, clock)
    # what was due went on without waiting; then each hold, then the stop at the first record not due
    assert [(offsets, stop) for _, offsets, stop in reads] == [
        ([0, 1], "limit"),
        ([2, 3], "limit"),
        ([4], "not_due"),
    ]
    assert reads[0][0] == T
    assert T + 105 <= reads[1][0] <= T + 110 + 100
    assert sum(clock.slept) * 1000 <= 400  # never past the cutoff


def test_a_hold_is_bounded_by_the_clock_never_by_a_header(monkeypatch):
    # an explicit cutoff far ahead: records due past the hold go on at once, as the cutoff says
    clock = Clock()
    reader = _reader(monkeypatch, [Message(0, T + 5_000), Message(1, T + 6_000)], clock, cutoff=T + 3_600_000)
    chunk = reader.read(100)
    assert [m.offset() for m in chunk.messages] == [0, 1]
    assert clock.slept == []
    # a due time past the horizon is not believed: due at once, not held
    clock = Clock()
    far = H.encode_big_integer(T + 10 * 365 * 86_400_000)
    reader = _reader(monkeypatch, [Message(0, None, raw=far)], clock, cutoff=T + 400)
    assert [m.offset() for m in reader.read(100).messages] == [0]
    assert clock.slept == []
    # a clock that stands still cannot make the hold longer than the hold itself
    frozen = FrozenClock()
    reader = _reader(monkeypatch, [Message(0, T + 300), Message(1, T + 390)], frozen, cutoff=T + 400)
    assert [m.offset() for m in reader.read(100).messages] == [0, 1]
    assert sum(frozen.slept) * 1000 == pytest.approx(400)
    # no hold (hold_ms 0): records in the pass go on as before
    clock = Clock()
    reader = _reader(monkeypatch, [Message(0, T + 300)], clock, cutoff=T + 400, hold_ms=0)
    assert [m.offset() for m in reader.read(100).messages] == [0]
    assert clock.slept == []


def test_a_held_record_waits_for_the_next_read_and_a_read_of_nothing_keeps_it(monkeypatch):
    clock = Clock()
    reader = _reader(monkeypatch, [Message(0, T), Message(1, T + 200)], clock, cutoff=T + 400)
    assert [m.offset() for m in reader.read(100).messages] == [0]
    assert reader.read(0).messages == []  # a read of no records keeps the held one
    chunk = reader.read(100)
    assert ([m.offset() for m in chunk.messages], chunk.stop) == ([1], "end")
    assert clock.now >= T + 200


# ------------------------------------------------------------------ the operator's wait for its wave
def test_the_local_operator_leads_its_wave_only_when_its_cutoff_is_now():
    from types import SimpleNamespace

    from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
    from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

    wave = wall_clock_ms() + 300  # within the lead: no sleep
    payload = {"kind": "tier_due", "not_before_ms": wave}
    context = {"triggering_asset_events": {"due": [SimpleNamespace(extra={"payload": payload})]}}
    op = ReprocessTierOperator(task_id="r", topology="t.yaml", tier=1, handler="m:f", cutoff="now")
    assert op.cutoff_is_now(context)
    cutoff = op.wait_for_wave(context, lead_ms=400)
    assert cutoff is not None
    assert cutoff >= wave + 400
    assert op.cutoff_ms(context, cutoff) >= cutoff
    assert op.wait_for_wave({}, lead_ms=400) is None  # no wave: no wait, the cutoff is now
    fixed = ReprocessTierOperator(
        task_id="r", topology="t.yaml", tier=1, handler="m:f", cutoff="2024-01-02T00:00:00+00:00"
    )
    assert not fixed.cutoff_is_now(context)
    assert fixed.cutoff_ms(context, cutoff) == 1_704_153_600_000  # an explicit cutoff is the run's own
