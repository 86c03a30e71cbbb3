"""
``python -m bench.frozen_lanes``: how late a topology watcher's healthy lanes fire while others are frozen.

    python -m bench.frozen_lanes                          # 20 lanes, 10 frozen, 3 rounds of each case
    python -m bench.frozen_lanes --rounds 5 --bootstrap HOST:PORT

One :class:`~airflow_kafka_retry.triggers.topology_events.TopologyDueEventTrigger` with ``--lanes`` tier
lanes (one partition each) runs at its default timings but ``idle_check`` 1 s (``--idle-check``: each
lane reads its group's offsets every second, as a lane does while a head or a wave is pending), on an
event loop whose default executor has 6 threads (asyncio's default on a 2-core triggerer). Every lane's
topic gets one record due ``--due-in`` seconds after the watcher started (30: by then the frozen lanes'
first reads have failed at their 15 + 5 s deadline, and they are opened again and again while the
others wait for their due time).
Case ``unfrozen``: every lane reads its group's committed offsets through the triggerer's reader child
(``engine/heads/offset_reader.py``). Case ``frozen``: half the lanes (every other one) read them through a
reader child of their own that is stopped (SIGSTOP) for the whole round, each replacement too, its real
admin client inside: their reads never answer, as with a lost coordinator. The figure is the lateness
of each healthy lane: when its first event came minus the records' due time
(issue 48 target: frozen within +1 s of unfrozen). Writes ``bench/results/<UTC>-frozen-lanes.json`` (or
``--out DIR``). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.given_broker import given_broker
from bench.results_file import write_new_result

RESULTS = Path(__file__).resolve().parent / "results"
CONN_ID = "akr_bench_frozen_lanes"


def _now() -> int:
    return time.time_ns() // 1_000_000


def _produce_due(bootstrap: str, topics: list[str], due_ms: int) -> None:
    from confluent_kafka import Producer

    from airflow_kafka_retry.policy.headers import codec as H

    producer = Producer({"bootstrap.servers": bootstrap})
    headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due_ms))]
    for topic in topics:
        producer.produce(topic, value=b"bench", partition=0, headers=headers)
    if producer.flush(30) != 0:
        raise RuntimeError("the due records were not delivered within 30 s")


class _Freezer:
    """Committed-offset reads of some groups through a reader child kept stopped (each new one too)."""

    def __init__(self, bootstrap: str, groups: set[str]) -> None:
        from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader

        self.groups = groups
        self.reader = OffsetReader({"bootstrap.servers": bootstrap})
        self.stopped: set[int] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep_stopped, daemon=True)

    def _keep_stopped(self) -> None:
        while not self._done.wait(0.02):
            pid = self.reader.pid
            if pid is not None and pid not in self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                self.stopped.add(pid)

    @contextlib.contextmanager
    def routing(self) -> Iterator[None]:
        from airflow_kafka_retry.engine.heads.shared_consumer import Lease

        real = Lease.committed
        freezer = self

        def committed(lease: Lease, group: str, keys: Any, timeout_s: float) -> dict[Any, int]:
            if group in freezer.groups:
                return freezer.reader.committed(group, keys, timeout_s)
            return real(lease, group, keys, timeout_s)

        Lease.committed = committed  # type: ignore[method-assign]
        self._thread.start()
        try:
            yield
        finally:
            Lease.committed = real  # type: ignore[method-assign]
            self._done.set()
            self._thread.join()
            for pid in self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self.reader.close()


async def _round(
    bootstrap: str, lanes: int, frozen: bool, due_in_s: float, window_s: float, idle_check: float
) -> dict[str, Any]:
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
    from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger
    from airflow_kafka_retry.triggers.watching import MemoryStore

    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=6))
    topics = [unique_topic(f"frz{i}") for i in range(lanes)]
    create_topics(bootstrap, topics, 1)
    specs = [
        {"name": f"retry_{i + 1}", "topics": [t], "group": unique_topic(f"g{i}"), "tier_index": i + 1}
        for i, t in enumerate(topics)
    ]
    frozen_specs = specs[1::2] if frozen else []
    healthy = [s for s in specs if s not in frozen_specs]
    trigger = TopologyDueEventTrigger(
        topology_topic="bench", lanes=specs, kafka_conn_id=CONN_ID, idle_check=idle_check
    )
    trigger.asset_state_store = MemoryStore()  # type: ignore[assignment]
    first: dict[str, int] = {}

    async def collect() -> None:
        async for event in trigger.run():
            for name in event.payload["due"]:
                first.setdefault(name, _now())

    freezer = _Freezer(bootstrap, {s["group"] for s in frozen_specs})
    threads_peak = 0
    try:
        with freezer.routing():
            started = _now()
            due = started + int(due_in_s * 1000)
            await asyncio.to_thread(_produce_due, bootstrap, topics, due)
            task = asyncio.create_task(collect())
            deadline = time.monotonic() + due_in_s + window_s
            while time.monotonic() < deadline and not all(s["name"] in first for s in healthy):
                threads_peak = max(threads_peak, threading.active_count())
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        delete_topics(bootstrap, topics)
    late = [first[s["name"]] - due for s in healthy if s["name"] in first]
    return {
        "frozen_lanes": len(frozen_specs),
        "healthy_lanes": len(healthy),
        "healthy_fired": len(late),
        "lateness_ms": sorted(late),
        "lateness_p50_ms": int(statistics.median(late)) if late else None,
        "lateness_max_ms": max(late) if late else None,
        "frozen_fired": sum(1 for s in frozen_specs if s["name"] in first),
        "threads_peak": threads_peak,
        "abandoned_calls_after": _abandoned_calls(),
    }


def _abandoned_calls() -> int | None:
    """Abandoned watcher calls still running (None: a tree without ``broker_calls``, run for comparison)."""
    try:
        from airflow_kafka_retry.triggers.broker_calls import abandoned_calls
    except ImportError:
        return None
    return abandoned_calls()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.frozen_lanes", description=__doc__.split("\n")[1])
    parser.add_argument("--lanes", type=int, default=20, help="lanes of the topology (half frozen)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each case, interleaved")
    parser.add_argument(
        "--due-in", type=float, default=30.0, help="seconds from start to the records' due time"
    )
    parser.add_argument("--idle-check", type=float, default=1.0, help="the watcher's idle_check (s)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds past the due time watched")
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    os.environ["AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS"] = "True"
    started = datetime.datetime.now(datetime.UTC)
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    with given_broker(args.bootstrap) as (bootstrap, _):
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        )
        for i in range(args.rounds):
            for frozen in (False, True):
                run = asyncio.run(
                    _round(bootstrap, args.lanes, frozen, args.due_in, args.window, args.idle_check)
                )
                run = {"case": "frozen" if frozen else "unfrozen", "round": i + 1, **run}
                runs.append(run)
                fired = f"{run['healthy_fired']}/{run['healthy_lanes']}"
                sys.stdout.write(
                    f"{run['case']} round {i + 1}: {fired} healthy lanes fired, lateness p50 "
                    f"{run['lateness_p50_ms']} ms, max {run['lateness_max_ms']} ms; "
                    f"{run['threads_peak']} threads at most\n"
                )
    summary = {}
    for case in ("unfrozen", "frozen"):
        late = [ms for r in runs if r["case"] == case for ms in r["lateness_ms"]]
        summary[case] = {
            "p50_ms": int(statistics.median(late)) if late else None,
            "max_ms": max(late) if late else None,
        }
    out = write_new_result(
        args.out / f"{started:%Y-%m-%dT%H%M%SZ}-frozen-lanes.json",
        {
            "bench": "frozen_lanes",
            "command": "python -m bench.frozen_lanes " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": started.isoformat(timespec="seconds"),
            "machine": {
                "cores": os.cpu_count(),
                "load_average_before": load_before,
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            },
            "summary": summary,
            "runs": runs,
        },
    )
    sys.stdout.write(f"summary: {json.dumps(summary)}\nwritten to {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
