"""
``python -m bench.topology_watchers``: what idle topology watchers cost a triggerer in memory, and where.

    python -m bench.topology_watchers                        # 200 topologies, own consumers then shared
    python -m bench.topology_watchers --topologies 50,200 --mode own
    python -m bench.topology_watchers --bootstrap HOST:PORT   # an existing broker instead of a fresh one
    python -m bench.topology_watchers --mode shared --settle 600 --window 300  # idle lanes backed off

The capacity bench (``bench.event_tiers --capacity``) measures the whole triggerer, Airflow's own part
included (its supervisor, the trigger runner, the log server). This one isolates the provider's part: N
:class:`~airflow_kafka_retry.triggers.topology_events.TopologyDueEventTrigger` run on one event loop, as
the triggerer's runner runs them (each ``run()`` a task, its wave store a ``MemoryStore``), on N idle
topologies of the factory's shape (main, retry-1, retry-2 and the DLT, 3 partitions each; the lanes
``main``, ``retry_1``, ``retry_2`` and ``watch_dlt``). Each mode and size runs in a fresh Python process
(freed memory is not handed back to the system), which reports its memory (RSS, USS: ``smaps``) after
its imports, once every lane's watch opened and ``--settle`` (10 s) passed, and after a ``--window`` of
idle watching (30 s), plus its threads, broker connections and, with ``--tracemalloc``, the Python
allocations that grew most.

Over the idle window it also reports the CPU seconds of the watching process, of its children (the
committed-offset reader) and of the broker when the bench started it (its JVM), and the broker requests
the watchers sent, counted in the bench process at the provider's client calls: ``metadata``
(``AdminClient.list_topics``, one Metadata request per call), ``list_offsets`` (one ListOffsets request per
leader broker per call) and ``committed`` (one ``ListConsumerGroupOffsets`` of one group, sent by the reader
child: a FindCoordinator and an OffsetFetch request). The shared consumer's own long-polling fetch (one
at a time for every watch) is not counted.

Modes: ``shared`` (``[kafka_retry] shared_watch_consumers`` on, the default: one consumer for the
process, committed offsets read by its child, ``engine/heads/offset_reader.py``, whose memory is counted) and
``own`` (off: one consumer per lane). Writes
``bench/results/<UTC date and time>-topology-watchers.json`` (or ``--out DIR``). Measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.given_broker import given_broker
from bench.results_file import claim_result_file

RESULTS = Path(__file__).resolve().parent / "results"
CONN_ID = "akr_bench_watchers"
LANES = (("main", 0), ("retry_1", 1), ("retry_2", 2))


def _memory_mb() -> dict[str, float]:
    """This process's memory, and with its children (the committed-offset reader of the shared mode)."""
    me = psutil.Process()
    info = me.memory_full_info()
    children = [c.memory_full_info() for c in me.children(recursive=True)]
    return {
        "rss_mb": round(info.rss / 2**20, 1),
        "uss_mb": round(info.uss / 2**20, 1),
        "children": len(children),
        "with_children_rss_mb": round((info.rss + sum(c.rss for c in children)) / 2**20, 1),
        "with_children_uss_mb": round((info.uss + sum(c.uss for c in children)) / 2**20, 1),
    }


_CALLS: Counter[str] = Counter()
_CALLS_LOCK = threading.Lock()


def _count_calls() -> None:
    """Count the provider's broker requests in this process (see the module's docstring)."""
    from confluent_kafka.admin import AdminClient

    from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader

    def counted(owner: Any, method: str, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            with _CALLS_LOCK:
                _CALLS[name] += 1
            return original(*args, **kwargs)

        setattr(owner, method, call)

    counted(AdminClient, "list_topics", "metadata")
    counted(AdminClient, "list_offsets", "list_offsets")
    counted(OffsetReader, "committed", "committed")


#: The longest the bench waits for every lane's watch to open.
OPEN_WAIT_S = 300.0


def _count_openings(lanes: int) -> asyncio.Event:
    """Set once ``lanes`` lanes (groups) opened their watch."""
    from airflow_kafka_retry.triggers import topology_events

    opened: set[str] = set()
    done = asyncio.Event()
    original = topology_events.open_watch

    async def open_watch(kafka_conn_id: str, topics: Any, group: str, **kwargs: Any) -> Any:
        watch = await original(kafka_conn_id, topics, group, **kwargs)
        opened.add(group)
        if len(opened) >= lanes:
            done.set()
        return watch

    topology_events.open_watch = open_watch  # type: ignore[assignment]
    return done


def _cpu_s(process: psutil.Process | None) -> float | None:
    """A process's CPU seconds (user and system); None: no process, or gone."""
    if process is None:
        return None
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _children_cpu_s(me: psutil.Process) -> dict[int, float]:
    found = {}
    for child in me.children(recursive=True):
        if (cpu := _cpu_s(child)) is not None:
            found[child.pid] = cpu
    return found


def _lanes(name: str) -> list[dict[str, Any]]:
    topics = {0: name, 1: f"{name}-retry-1", 2: f"{name}-retry-2"}
    lanes: list[dict[str, Any]] = [
        {"name": lane, "topics": [topics[index]], "group": f"{name}-{lane}", "tier_index": index}
        for lane, index in LANES
    ]
    lanes.append(
        {"name": "watch_dlt", "topics": [f"{name}-dlt"], "group": f"{name}-dlt-watch", "read_due": False}
    )
    return lanes


async def _watch(
    names: list[str], window_s: float, broker_pid: int | None, settle_s: float | None
) -> dict[str, Any]:
    from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger
    from airflow_kafka_retry.triggers.watching import MemoryStore

    imported = _memory_mb()
    me = psutil.Process()
    triggers = []
    for name in names:
        trigger = TopologyDueEventTrigger(topology_topic=name, lanes=_lanes(name), kafka_conn_id=CONN_ID)
        trigger.asset_state_store = MemoryStore()  # type: ignore[attr-defined]
        triggers.append(trigger)
    all_open = _count_openings(len(names) * (len(LANES) + 1))
    tasks = [asyncio.create_task(_drive(t)) for t in triggers]
    started = time.monotonic()
    # every lane's watch opens (a fresh topic's first look may fail: NOT_LEADER, opened again after a pause)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_open.wait(), OPEN_WAIT_S)
    # and reads its heads (with --settle, the lanes' idle checks back off)
    await asyncio.sleep(settle_s if settle_s is not None else 10.0)
    opened = _memory_mb()
    snapshot = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    broker = psutil.Process(broker_pid) if broker_pid else None
    with _CALLS_LOCK:
        calls_before = Counter(_CALLS)
    cpu_before, children_before, broker_before = _cpu_s(me), _children_cpu_s(me), _cpu_s(broker)
    load_before = os.getloadavg()
    await asyncio.sleep(window_s)
    cpu_after, children_after, broker_after = _cpu_s(me), _children_cpu_s(me), _cpu_s(broker)
    with _CALLS_LOCK:
        calls = {k: v - calls_before.get(k, 0) for k, v in sorted(_CALLS.items())}
    after = _memory_mb()
    # a child that ended in the window (a retired reader) is not counted; one started in it counts whole
    children_s = sum(cpu - children_before.get(pid, 0.0) for pid, cpu in children_after.items())
    idle = {
        "window_s": window_s,
        "process_cpu_s": round((cpu_after or 0) - (cpu_before or 0), 2),
        "children_cpu_s": round(children_s, 2),
        "broker_cpu_s": (
            round(broker_after - broker_before, 2)
            if broker_after is not None and broker_before is not None
            else None
        ),
        "broker_calls": calls,
        "broker_calls_per_topology_minute": {
            k: round(v * 60 / window_s / len(names), 3) for k, v in calls.items()
        },
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    threads = me.num_threads()
    grown = []
    if snapshot is not None:  # what the watchers' Python objects hold, by the file that allocated them
        top = snapshot.statistics("filename")[:15]
        grown = [f"{s.traceback[0].filename}: {round(s.size / 2**20, 2)} MB in {s.count} blocks" for s in top]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "after_imports": imported,
        "watching": opened,
        "after_window": after,
        "per_topology_uss_kb": round(
            (after["with_children_uss_mb"] - imported["with_children_uss_mb"]) * 1024 / len(names), 1
        ),
        "idle_window": idle,
        "threads": threads,
        "open_s": round(time.monotonic() - started - window_s, 1),  # with the settling time
        "python_allocations_by_file": grown,
    }


async def _drive(trigger: Any) -> None:
    async for _event in trigger.run():
        pass


def _fetch_wait(args: argparse.Namespace) -> dict[str, int]:
    """The connection's ``fetch.wait.max.ms`` when ``--fetch-wait-ms`` is given (else the watch's default)."""
    return {} if args.fetch_wait_ms is None else {"fetch.wait.max.ms": args.fetch_wait_ms}


def child(args: argparse.Namespace) -> int:
    """One mode and size in this process: create the topics, watch, print the result as JSON."""
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": args.bootstrap, **_fetch_wait(args)}}
    )
    names = [unique_topic(f"bw{i}") for i in range(args.count)]
    topics = [t for n in names for t in (n, f"{n}-retry-1", f"{n}-retry-2", f"{n}-dlt")]
    for start in range(0, len(topics), 1000):  # a CreateTopics request takes at most 10,000 partitions
        create_topics(args.bootstrap, topics[start : start + 1000], partitions=3, timeout=60.0)
    if args.tracemalloc:
        tracemalloc.start()
    _count_calls()
    result = asyncio.run(_watch(names, args.window, args.broker_pid, args.settle))
    found = {"mode": args.mode, "topologies": args.count, "fetch_wait_ms": args.fetch_wait_ms, **result}
    sys.stdout.write(json.dumps(found) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.topology_watchers", description=__doc__)
    parser.add_argument("--topologies", default="200", help="comma-separated sizes (default 200)")
    parser.add_argument("--mode", choices=("own", "shared", "both"), default="both")
    parser.add_argument("--window", type=float, default=30.0, help="idle seconds watched (default 30)")
    parser.add_argument(
        "--settle",
        type=float,
        help="seconds watched after every watch opened, before the window (default 10)",
    )
    parser.add_argument("--tracemalloc", action="store_true", help="list the Python allocations by file")
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument(
        "--fetch-wait-ms", type=int, help="the watch consumers' fetch.wait.max.ms (default: the provider's)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)  # a child process's one size
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)  # the broker the bench started
    args = parser.parse_args(argv)
    if args.count is not None:
        return child(args)
    modes = ("own", "shared") if args.mode == "both" else (args.mode,)
    started = datetime.datetime.now(datetime.UTC)
    runs = []
    with given_broker(args.bootstrap) as (bootstrap, broker):
        for count in (int(c) for c in args.topologies.split(",")):
            for mode in modes:
                env = {**os.environ, "AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS": str(mode == "shared")}
                command = [sys.executable, "-m", "bench.topology_watchers", "--bootstrap", bootstrap]
                command += ["--count", str(count), "--mode", mode, "--window", str(args.window)]
                command += ["--tracemalloc"] if args.tracemalloc else []
                command += ["--settle", str(args.settle)] if args.settle is not None else []
                if args.fetch_wait_ms is not None:
                    command += ["--fetch-wait-ms", str(args.fetch_wait_ms)]
                command += ["--broker-pid", str(broker.pid)] if broker is not None else []
                # its topics, the openings, the settling and the window, with room to spare
                limit = 600 + OPEN_WAIT_S + (args.settle or 10.0) + args.window
                done = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=limit, check=False
                )
                if done.returncode != 0:
                    sys.stderr.write(done.stderr[-4000:])
                    return done.returncode
                run = json.loads(done.stdout.strip().splitlines()[-1])
                runs.append(run)
                before, after = run["after_imports"], run["after_window"]
                sys.stdout.write(
                    f"{mode} {count}: USS with children {before['with_children_uss_mb']} -> "
                    f"{after['with_children_uss_mb']} MB ({run['per_topology_uss_kb']} kB per topology; "
                    f"{after['children']} child process(es)), RSS {after['with_children_rss_mb']} MB, "
                    f"{run['threads']} threads\n"
                )
                idle = run["idle_window"]
                sys.stdout.write(
                    f"  idle {idle['window_s']:.0f} s: CPU s process {idle['process_cpu_s']}, children "
                    f"{idle['children_cpu_s']}, broker {idle['broker_cpu_s']}; broker calls "
                    f"{idle['broker_calls']}; load {idle['load_average_before_after']}\n"
                )
    out = claim_result_file(args.out, started, "topology-watchers")
    out.write_text(
        json.dumps(
            {
                "bench": "topology_watchers",
                "command": "python -m bench.topology_watchers "
                + " ".join(argv if argv is not None else sys.argv[1:]),
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": {"cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
                "runs": runs,
            },
            indent=1,
        )
    )
    sys.stdout.write(f"written to {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
