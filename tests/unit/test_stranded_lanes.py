"""A topology run also runs the lanes whose event Airflow's scheduler left to no run (``stranded_lanes``).

Seen in a CI run and reproduced: the DLT watch fired at .23 s and ``main`` at .70 s; the scheduler made one
run from the first event and left the second to the asset's next event, 45 s later (``refire_after``).
"""

from __future__ import annotations

from types import SimpleNamespace

from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.topology_lanes import TOPOLOGY_DUE, stranded_lanes

URI = "kafka-retry-topology://kafka_default/orders"


def _events(*payloads: dict) -> dict:
    return {URI: [SimpleNamespace(extra={"payload": p}) for p in payloads]}


def _event(due: list[str], fired_ms: int | None, *, lanes: bool = True) -> dict:
    payload: dict = {"kind": TOPOLOGY_DUE, "due": due, "lanes": {}}
    if lanes:
        payload["lanes"] = {name: {"fired_ms": fired_ms} for name in due}
    if fired_ms is not None:
        payload["fired_ms"] = fired_ms
    return payload


def _wave(fired_ms: int) -> Wave:
    return Wave((("orders-retry-1", 0, 5),), fired_ms, fired_ms)


def test_a_lane_whose_wave_is_newer_than_every_event_of_the_run_is_stranded():
    events = _events(_event(["watch_dlt"], 1_000), _event(["retry_1"], 1_200))
    saved = {"retry_1": _wave(1_200), "retry_2": _wave(1_700), "main": _wave(900), "watch_dlt": None}
    assert stranded_lanes(events, saved) == {"retry_2"}
    # a wave fired with the newest event is that event's (not stranded)
    assert stranded_lanes(events, {"retry_2": _wave(1_200)}) == set()


def test_the_newest_event_time_comes_from_the_event_or_its_lanes():
    # an older payload without the event's own time: its lanes' times count
    assert stranded_lanes(_events(_event(["retry_1"], None)), {"retry_2": _wave(5)}) == set()
    older = {"kind": TOPOLOGY_DUE, "due": ["retry_1"], "lanes": {"retry_1": {"fired_ms": 10}}}
    assert stranded_lanes(_events(older), {"retry_2": _wave(11), "main": _wave(10)}) == {"retry_2"}
    # a setup event names no lane: its own time counts
    setup = _event(["ensure_topics"], 50, lanes=False)
    assert stranded_lanes(_events(setup), {"retry_1": _wave(60), "retry_2": _wave(40)}) == {"retry_1"}
    # no time anywhere (or not an int): nothing is called stranded
    assert stranded_lanes(_events({"kind": TOPOLOGY_DUE, "due": [], "lanes": {}}), {"r": _wave(1)}) == set()
    flag = _events({"kind": TOPOLOGY_DUE, "due": ["retry_1"], "lanes": {}, "fired_ms": True})
    assert stranded_lanes(flag, {"r": _wave(2)}) == set()
    assert stranded_lanes(None, {"r": _wave(1)}) == set()
