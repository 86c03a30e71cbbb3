"""``bench/ordering_figures.py``: lateness, held waits and drain rates from a ledger file's lines."""

from __future__ import annotations

from bench import ordering_figures as F
from testkit.ordering_ledger import Entry, Plan, check_order


def ok(key: str, seq: int, attempt: int, at: int, pid: int = 1) -> Entry:
    return Entry(True, key, seq, attempt, pid, at)


def fail(key: str, seq: int, attempt: int, at: int, pid: int = 1) -> Entry:
    return Entry(False, key, seq, attempt, pid, at)


def test_a_held_record_waits_from_its_heads_end_and_one_run_before_it_is_counted():
    # a0 fails at 1000, succeeds in a tier at 3000; a1 (produced at 1500, while a0 was in flight) runs at 3400
    # b0 fails at 1000, ends at 2000; b1 produced at 1200 but ran at 1300: before its head ended
    entries = [
        fail("a", 0, 1, 1000),
        fail("b", 0, 1, 1000),
        ok("b", 1, 1, 1300),
        ok("b", 0, 2, 2000),
        ok("a", 0, 2, 3000),
        ok("a", 1, 1, 3400),
        ok("a", 2, 1, 3500),
    ]
    produced = {("a", 0): 900, ("b", 0): 900, ("b", 1): 1200, ("a", 1): 1500, ("a", 2): 3450}
    fate = F.fates(entries)
    assert (fate[("a", 0)].first_ms, fate[("a", 0)].first_failed, fate[("a", 0)].end_ms) == (1000, True, 3000)
    records = [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2)]
    waits, before = F.held_waits(records, produced, fate)
    assert waits == [0.4]  # a2 was produced after a0 ended: not held
    assert before == 1
    assert F.lateness_s([("a", 2), ("b", 1)], produced, fate) == [0.05, 0.1]
    assert F.drain_rate([("b", 1), ("a", 1)], fate, 1000, 2000) == {
        "records": 1,
        "seconds": 0.3,
        "records_per_s": 3,
    }
    assert F.percentiles([3.0, 1.0, 2.0])["p50"] == 2.0
    assert F.percentiles([])["count"] == 0


def test_the_order_check_names_the_key_and_forgives_only_a_killed_chunk_handled_again():
    plan = Plan([("k", 0), ("k", 1), ("k", 2)], seed=0)
    assert not plan.dead()
    again = [ok("k", 0, 1, 1), ok("k", 1, 1, 2, pid=9), ok("k", 1, 1, 3), ok("k", 2, 1, 4)]
    assert check_order(plan, again, killed_pids={9}).holds
    assert not check_order(plan, again).holds  # the same lines, no process killed: handled twice
    swapped = [ok("k", 0, 1, 1), ok("k", 2, 1, 2), ok("k", 1, 1, 3)]
    report = check_order(plan, swapped)
    assert (report.out_of_order_keys, report.lost, report.duplicates) == (1, 0, 0)
    assert report.problems == [
        "key 'k': expected [0, 1, 2], handled [0, 2, 1] (lost [], twice 0, dead-lettered yet handled [])"
    ]
