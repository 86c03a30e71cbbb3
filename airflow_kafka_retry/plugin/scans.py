"""
The view's Kafka reads of one topology: cached for a few seconds, and capped in number at once.

Refreshes of a topology within ``[kafka_retry] cache_ttl`` seconds reuse one read of the broker, and
a refresh arriving while it is read answers "busy" on each topic at once rather than holding a
threadpool thread until the read ends (with a slow broker, waiters would exhaust the API server's
threads). At most ``[kafka_retry] max_scans`` scans (one per topic) run at once per API-server process
(each of ``airflow api-server --workers N`` has its own cap), for all users together; a scan that
cannot start within the broker timeout is reported on its topic ("busy"), and a read with such a
topic, or one the broker did not finish in time, is not cached. Only broker data is
cached, never who may see it: permissions are checked on every request.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_kafka_retry.engine.kafka.deadlines import bounded
from airflow_kafka_retry.engine.scans.backlog import scan_backlog
from airflow_kafka_retry.engine.scans.dead_letter_counts import count_dead_letters
from airflow_kafka_retry.engine.scans.order_state import read_order_state
from airflow_kafka_retry.policy.headers.bounds import bound_counts

if TYPE_CHECKING:
    from airflow_kafka_retry.plugin.settings import ViewSettings
    from airflow_kafka_retry.policy.topology.model import Topology

T = TypeVar("T")


@dataclass(frozen=True)
class TopologyScan:
    """
    What the broker said, by topic: ``backlog`` of the tiers, ``dead`` counts of the DLT/parking topics.

    ``blocked``: under ``ordering: key``, the blocked keys per partition (``engine/scans/order_state.py``);
    None for a topology without key order.
    """

    now_ms: int
    backlog: dict[str, dict[str, Any]]
    dead: dict[str, dict[str, Any]]
    complete: bool = True
    blocked: dict[str, Any] | None = None


def busy_scan(topology: Topology, *, now_ms: int) -> TopologyScan:
    """What a refresh answers while another one reads the same topology: "busy" on every topic."""

    def busy(topic: str) -> dict[str, Any]:
        return {"topic": topic, "error": f"{topic}: busy, another refresh is reading it; refresh in a moment"}

    return TopologyScan(
        now_ms=now_ms,
        backlog={t.topic: busy(t.topic) for t in topology.tiers},
        dead={t: busy(t) for t in dead_topics(topology)},
        complete=False,
        blocked=busy(topology.order_state_topic) if topology.order_state_topic else None,
    )


def dead_topics(topology: Topology) -> list[str]:
    """The topics of the DLT cards: the DLTs, the parking topic, the other frameworks' queues it names."""
    parking = [topology.parking_topic] if topology.parking_topic else []
    return [t.topic for t in topology.dlt_tiers] + parking + list(topology.dead_letter_queue_topics)


@cache
def _gate(max_scans: int) -> threading.BoundedSemaphore:
    """
    The cap of this API-server process, one per configured size.

    The configuration is fixed in a running server.
    """
    return threading.BoundedSemaphore(max_scans)


class ScanBusy(Exception):
    """Every one of the process's Kafka scan slots stayed taken for the broker timeout."""


def run_capped(settings: ViewSettings, seconds: float, what: str, work: Callable[[], T]) -> T:
    """
    ``work()`` (Kafka reads or a write) in a thread of its own, holding one of the process's scan slots.

    The slot is held until ``work`` ends, even past ``seconds``: the cap counts what still runs.

    :raises ScanBusy: no slot became free within ``[kafka_retry] timeout`` seconds.
    :raises CallStuckError: ``work`` did not end within ``seconds`` (it is abandoned, naming ``what``).
    """
    gate = _gate(settings.max_scans)
    if not gate.acquire(timeout=settings.timeout_s):
        raise ScanBusy(
            f"the view is busy ({settings.max_scans} Kafka scans running, [kafka_retry] max_scans); "
            "try again in a moment"
        )

    def held() -> T:
        try:
            return work()
        finally:
            gate.release()

    return bounded(held, seconds=seconds, what=what)


def _capped(
    gate: threading.BoundedSemaphore, wait_s: float, scan: Callable[[], Any]
) -> dict[str, Any] | None:
    if not gate.acquire(timeout=wait_s):
        return None
    try:
        return _bounded(scan().to_dict())
    finally:
        gate.release()


def _bounded(result: dict[str, Any]) -> dict[str, Any]:
    """A DLT's counts by exception class (names from headers) through the one bound; a backlog as it is."""
    if "by_exception" in result:
        result["by_exception"] = bound_counts(result["by_exception"], by_count=True)
    for hour in result.get("by_hour") or ():
        hour["counts"] = bound_counts(hour["counts"], by_count=True)
    return result


def read_topology(
    topology: Topology, settings: ViewSettings, kafka_config: dict[str, Any], *, now_ms: int
) -> TopologyScan:
    """Every tier's backlog and every DLT's counts, each scan in a worker thread under the process's cap."""
    timeout, gate = settings.timeout_s, _gate(settings.max_scans)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kafka-retry-view")
    try:
        backlog_jobs = {
            t.topic: pool.submit(
                _capped,
                gate,
                timeout,
                functools.partial(
                    scan_backlog,
                    kafka_config,
                    t.topic,
                    topology.consumer_group(t),
                    now_ms=now_ms,
                    timeout_s=timeout,
                ),
            )
            for t in topology.tiers
        }
        dead_jobs = {
            topic: pool.submit(
                _capped,
                gate,
                timeout,
                functools.partial(
                    count_dead_letters,
                    kafka_config,
                    topic,
                    timeout_s=timeout,
                    assume=topology.queue_family(topic),
                ),
            )
            for topic in dead_topics(topology)
        }
        state = topology.order_state_topic  # ordering: key: the blocked keys too
        state_jobs = {}
        if state is not None:
            read = functools.partial(read_order_state, kafka_config, state, timeout_s=timeout, now_ms=now_ms)
            state_jobs[state] = pool.submit(_capped, gate, timeout, read)
        jobs = {**backlog_jobs, **dead_jobs, **state_jobs}
        answers = {topic: _answer(job, topic, settings) for topic, job in jobs.items()}
        _name_missing_acls(topology, kafka_config, [a for a, _ in answers.values()], settings.timeout_s)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a scan stuck past its deadline never holds the page
    return TopologyScan(
        now_ms=now_ms,
        backlog={t: answers[t][0] for t in backlog_jobs},
        dead={t: answers[t][0] for t in dead_jobs},
        complete=all(ok for _, ok in answers.values()),
        blocked=answers[state][0] if state else None,
    )


def _name_missing_acls(
    topology: Topology, kafka_config: dict[str, Any], answers: list[dict[str, Any]], timeout_s: float
) -> None:
    """
    Add to each refused topic's error the view's ACLs its principal lacks, asked once as that principal.

    Kafka answers a group the principal may not describe only with a timeout, and names no principal: the
    error then names the principal, the operation and the resource (``authorization.explain``).
    """
    from airflow_kafka_retry.engine.kafka.authorization import explain
    from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings

    refused = [a for a in answers if a.get("error")]
    if not refused:
        return
    needed = acl_bindings(topology, AclScope(include_main=True), roles=["view"])
    said = RuntimeError("; ".join(str(a["error"]) for a in refused))
    note = explain(said, kafka_config, needed, timeout=min(5.0, timeout_s))
    for answer in refused if note else ():
        answer["error"] = f"{answer['error']}; {note}"


def _answer(job: Any, topic: str, settings: ViewSettings) -> tuple[dict[str, Any], bool]:
    try:
        # a scan may wait up to the timeout for its turn under the cap, then has the timeout to answer
        result = job.result(timeout=2 * settings.timeout_s + 5)
    except FutureTimeout:
        late = f"{topic}: the broker did not answer within {settings.timeout_s:.0f}s"
        return {"topic": topic, "error": late}, False
    if result is None:
        busy = (
            f"{topic}: the view is busy ({settings.max_scans} Kafka scans running, "
            "[kafka_retry] max_scans); refresh in a moment"
        )
        return {"topic": topic, "error": busy}, False
    return result, True


class ScanCache:
    """
    Per topology, the last complete read for ``ttl_s`` seconds.

    One read at a time per topology, and "busy" for the others meanwhile.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[Any, tuple[float, TopologyScan]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(
        self, key: Any, ttl_s: float, read: Callable[[], TopologyScan], *, busy: Callable[[], TopologyScan]
    ) -> TopologyScan:
        """The fresh entry, else ``read()`` -- or ``busy()`` at once while another request reads ``key``."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
            entry = self._entries.get(key)
            if entry is not None and self._clock() - entry[0] < ttl_s:
                return entry[1]
        if not lock.acquire(blocking=False):
            return busy()
        try:
            entry = self._entries.get(key)
            if entry is not None and self._clock() - entry[0] < ttl_s:
                return entry[1]
            scan = read()
            if scan.complete:
                self._entries[key] = (self._clock(), scan)
            else:
                self._entries.pop(key, None)
            return scan
        finally:
            lock.release()


def cache_key(path: str, topology: Topology, settings: ViewSettings) -> tuple[Any, ...]:
    """What a read depends on: the file, its topics and groups as now configured, and the connection."""
    tiers = tuple((t.topic, topology.consumer_group(t)) for t in topology.tiers)
    return (path, settings.kafka_conn_id, tiers, tuple(dead_topics(topology)))
