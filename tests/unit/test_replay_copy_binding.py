"""A replay-log entry confirms only the copy it was written for (issue 38, item 3).

The audit headers of a real replayed copy can be copied onto another record. The log entry of a move
carries a digest of the copy (replay id, key, value), and a claim is trusted only when the failing
record's own key and value give that digest. Entries written before the digest existed still mark
their DLT record as replayed, but confirm no claim: such a copy that fails again is dead-lettered.
"""

from __future__ import annotations

from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, record_key
from airflow_kafka_retry.policy.headers.replay import ReplayAudit, copy_digest
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
from airflow_kafka_retry.policy.topology.model import Topology

NOW = 1_800_000_000_000
AUDIT = ReplayAudit("r-1", "orders-dlt", 2, 17, NOW)


def _topology() -> Topology:
    return Topology.from_mapping(
        {"topic": "orders", "group_id": "svc", "attempts": 3, "not_retryable": ["KeyError"]}
    )


def _log(**entry) -> ReplayLog:
    replay_log = ReplayLog("orders-dlt-replay-log")
    replay_log.add(
        record_key(2, 17), encode_entry({"replay_id": "r-1", "partition": 2, "offset": 17, **entry})
    )
    return replay_log


def test_the_digest_covers_the_replay_id_the_key_and_the_value():
    digest = copy_digest("r-1", b"k", b"v")
    assert digest == copy_digest("r-1", b"k", b"v")
    others = {
        copy_digest("r-2", b"k", b"v"),
        copy_digest("r-1", b"k2", b"v"),
        copy_digest("r-1", b"k", b"v2"),
        copy_digest("r-1", None, b"v"),
        copy_digest("r-1", b"", b"v"),
        copy_digest("r-1", b"k", None),
        copy_digest("r-1", b"kv", b""),  # no ambiguity where one field ends
    }
    assert digest not in others
    assert len(others) == 7


def test_the_log_confirms_only_the_logged_copy():
    replay_log = _log(copy=copy_digest("r-1", b"k", b"v"))
    assert replay_log.confirms(AUDIT, copy_digest("r-1", b"k", b"v"))
    assert not replay_log.confirms(AUDIT, copy_digest("r-1", b"k", b"another value"))
    other_replay = ReplayAudit("r-2", "orders-dlt", 2, 17, NOW)
    assert not replay_log.confirms(other_replay, copy_digest("r-2", b"k", b"v"))


def test_an_entry_from_before_the_digest_still_marks_the_record_replayed_but_confirms_nothing():
    replay_log = _log(target="orders")
    assert (2, 17) in replay_log.moved  # a later replay still skips that DLT record
    assert not replay_log.confirms(AUDIT, copy_digest("r-1", b"k", b"v"))


def test_the_resolver_passes_the_failing_records_own_digest():
    replay_log = _log(copy=copy_digest("r-1", b"k", b"v"))
    resolver = DestinationResolver(_topology(), clock=lambda: NOW, replay_known=replay_log.confirms)

    def resolve(key: bytes | None, value: bytes | None):
        return resolver.resolve(
            topic="orders",
            partition=2,
            attempt=1,
            exception=KeyError("fatal"),
            original_timestamp_ms=NOW,
            headers=AUDIT.headers(),
            key=key,
            value=value,
        )

    copy = resolve(b"k", b"v")
    assert (copy.topic, copy.parked, copy.untrusted_replay) == ("orders-parking", True, False)
    impostor = resolve(b"k", b"another value")
    assert (impostor.topic, impostor.parked, impostor.untrusted_replay) == ("orders-dlt", False, True)


def test_a_grown_log_is_read_from_where_the_last_read_ended(monkeypatch):
    """Only the entries appended since are read into what the check already knows (issue 38 item 10)."""
    from airflow_kafka_retry.engine.drain import replay_trust

    reads: list[tuple[object, object]] = []
    ends = iter([5, 9])

    def read_log(reader, topic, *, known=None, start=None):
        reads.append((known is not None, start))
        return known if known is not None else replay_trust.ReplayLog(topic)

    check = replay_trust.ReplayLogCheck({"bootstrap.servers": "x:1"})
    monkeypatch.setattr(replay_trust, "read_log", read_log)
    monkeypatch.setattr(check, "_end", lambda topic: next(ends))
    monkeypatch.setattr(check, "_open", lambda: None)
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit

    audit = ReplayAudit("replay-1", "orders-dlt", 0, 7, 0)
    assert check(audit, "digest") is False  # first look: the whole log
    check.new_read()  # the engine read its next piece
    assert check(audit, "digest") is False  # it grew from 5 to 9: only offsets 5 on
    assert reads == [(False, None), (True, 5)]


def test_forged_records_of_one_piece_cost_one_end_request(monkeypatch):
    """The log's end is asked once per piece read, not per record (issue 38 item 10)."""
    from airflow_kafka_retry.engine.drain import replay_trust
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit

    asked: list[str] = []
    check = replay_trust.ReplayLogCheck({"bootstrap.servers": "x:1"})
    monkeypatch.setattr(replay_trust, "read_log", lambda reader, topic, **kw: replay_trust.ReplayLog(topic))
    monkeypatch.setattr(check, "_end", lambda topic: asked.append(topic) or 5)
    monkeypatch.setattr(check, "_open", lambda: None)
    forged = [ReplayAudit("replay-x", "orders-dlt", 0, n, 0) for n in range(100)]
    assert not any(check(audit, "digest") for audit in forged)
    assert asked == ["orders-dlt-replay-log"]
    check.new_read()  # a new piece may hold copies whose log entries came after that end
    assert not any(check(audit, "digest") for audit in forged)
    assert asked == ["orders-dlt-replay-log"] * 2
