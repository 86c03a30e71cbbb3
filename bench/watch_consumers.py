"""
``python -m bench.watch_consumers``: what idle head watches cost one triggerer process.

    python -m bench.watch_consumers                    # 200 topics x 3 partitions, private then shared
    python -m bench.watch_consumers --topics 800 --mode shared
    python -m bench.watch_consumers --bootstrap HOST:PORT   # an existing broker instead of a fresh one

In event mode every asset watcher of the triggerer keeps a
:class:`~airflow_kafka_retry.engine.heads.head_watch.HeadWatch` open on its topics. This bench starts a real
Apache Kafka broker (``sandbox/kafka.py``; or uses ``--bootstrap``), creates N topics of 3 partitions
(nothing in them: the topologies are idle), opens one watch per topic in this process and runs them as
the triggers do: one asyncio task each, calling ``poll()`` every 0.5 s on the event loop and
``sync_committed()`` in a worker thread once per ``idle_check`` (30 s, each watch at its own offset).
Over a ``--window`` of idle watching (30 s) it records this process's CPU (user + system, as a share of
one core), its thread count and the TCP connections it holds to the broker, and the broker's own CPU
over the same window (a broker this bench started).
Modes: ``private`` (one consumer per watch: the behaviour before consumers were shared) and ``shared``
(the default: the watches of one process share one consumer per Kafka configuration), measured in turn
``--repeat`` times (2: the broker's JVM is warm for the second round; compare those), then the broker
alone with the topics and no watch over the same window.

Writes ``bench/results/<UTC date and time>-watch-consumers.json`` (or ``--out DIR``) whole, with the
machine's facts (cores, load average), and prints a summary. Figures are measured, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.engine.local.engine import available_cores
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from bench.given_broker import given_broker
from bench.results_file import claim_result_file

RESULTS = Path(__file__).resolve().parent / "results"
POLL_INTERVAL_S = 0.5  # the triggers' default poll_interval
IDLE_CHECK_S = 30.0  # the triggers' default idle_check


def _broker_connections(process: psutil.Process, port: int) -> int:
    return sum(
        1
        for c in process.net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == port
    )


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _watch_idle(watches: list[HeadWatch], window_s: float) -> None:
    """Run every watch as a trigger does for ``window_s`` seconds."""
    deadline = time.monotonic() + window_s

    async def one(watch: HeadWatch, first_check_s: float) -> None:
        next_check = time.monotonic() + first_check_s
        while time.monotonic() < deadline:
            if time.monotonic() >= next_check:
                await asyncio.to_thread(watch.sync_committed)
                next_check += IDLE_CHECK_S
            watch.poll()
            await asyncio.sleep(POLL_INTERVAL_S)

    rng = random.Random(30)
    await asyncio.gather(*(one(w, rng.uniform(0, IDLE_CHECK_S)) for w in watches))


def measure(
    bootstrap: str,
    topics: list[str],
    *,
    shared: bool,
    window_s: float,
    fetch_wait_ms: int | None,
    broker: psutil.Process | None,
) -> dict[str, Any]:
    """Open one watch per topic, let them settle, then measure ``window_s`` seconds of idle watching."""
    me = psutil.Process()
    port = int(bootstrap.rsplit(":", 1)[1])
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if fetch_wait_ms is not None:
        config["fetch.wait.max.ms"] = fetch_wait_ms
    before = {"threads": me.num_threads(), "connections": _broker_connections(me, port)}
    opened = time.monotonic()
    watches: list[HeadWatch] = []
    try:
        for topic in topics:
            watches.append(HeadWatch(config, [topic], f"{topic}-g", shared=shared))
        open_s = time.monotonic() - opened
        asyncio.run(_watch_idle(watches, 5.0))  # every partition's end reached
        complete = sum(w.complete for w in watches)
        cpu0, broker0, wall0 = _cpu(me), _cpu(broker) if broker else 0.0, time.monotonic()
        asyncio.run(_watch_idle(watches, window_s))
        cpu, wall = _cpu(me) - cpu0, time.monotonic() - wall0
        broker_cpu = _cpu(broker) - broker0 if broker else None
        return {
            "mode": "shared" if shared else "private",
            "fetch_wait_max_ms": fetch_wait_ms,
            "watches": len(watches),
            "partitions": sum(len(w.keys) for w in watches),
            "complete_watches": complete,
            "open_s": round(open_s, 2),
            "window_s": round(wall, 1),
            "cpu_s": round(cpu, 2),
            "cpu_pct_of_one_core": round(100 * cpu / wall, 1),
            "threads": me.num_threads() - before["threads"],
            "broker_connections": _broker_connections(me, port) - before["connections"],
            "rss_mb": round(me.memory_info().rss / 2**20, 1),
            "broker_cpu_pct_of_one_core": None if broker_cpu is None else round(100 * broker_cpu / wall, 1),
        }
    finally:
        for watch in watches:
            watch.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.watch_consumers", description=(__doc__ or "").strip().split("\n")[0]
    )
    parser.add_argument("--topics", type=int, default=200, help="watched topics, one watch each (200)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (3)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of idle watching measured (30)")
    parser.add_argument("--mode", choices=("both", "private", "shared"), default="both")
    parser.add_argument(
        "--fetch-wait-ms",
        type=int,
        help="fetch.wait.max.ms in the Kafka configuration (default: the watch's)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="measure the modes this many times in turn (2: the first warms up)",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results file")
    args = parser.parse_args(argv)
    now = datetime.datetime.now(datetime.UTC)
    load_start = [round(x, 2) for x in os.getloadavg()]
    modes = {"both": [False, True], "private": [False], "shared": [True]}[args.mode] * args.repeat
    runs: list[dict[str, Any]] = []
    idle: float | None = None
    with given_broker(args.bootstrap) as (bootstrap, broker):
        topics = [unique_topic(f"watch-{i}") for i in range(args.topics)]
        for start in range(0, len(topics), 50):
            create_topics(bootstrap, topics[start : start + 50], partitions=args.partitions, timeout=60)
        try:
            for shared in modes:
                run = measure(
                    bootstrap,
                    topics,
                    shared=shared,
                    window_s=args.window,
                    fetch_wait_ms=args.fetch_wait_ms,
                    broker=broker,
                )
                runs.append(run)
            if broker is not None:  # the broker with the topics and no watch, over the same window
                broker0, wall0 = _cpu(broker), time.monotonic()
                time.sleep(args.window)
                idle = round(100 * (_cpu(broker) - broker0) / (time.monotonic() - wall0), 1)
        finally:
            delete_topics(bootstrap, topics, timeout=60)
    document = {
        "date": now.isoformat(timespec="seconds"),
        "command": "python -m bench.watch_consumers " + " ".join(argv if argv is not None else sys.argv[1:]),
        "broker": args.bootstrap or "Apache Kafka (sandbox/kafka.py)",
        "poll_interval_s": POLL_INTERVAL_S,
        "idle_check_s": IDLE_CHECK_S,
        "machine": {
            "cores": available_cores(),
            "load_average": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        "runs": runs,
        "broker_cpu_pct_of_one_core_without_watches": idle,
    }
    path = claim_result_file(args.out, now, "watch-consumers")
    path.write_text(json.dumps(document, indent=2) + "\n")
    for run in runs:
        sys.stdout.write(
            f"{run['mode']:>7}: {run['watches']} watches ({run['partitions']} partitions): "
            f"{run['cpu_pct_of_one_core']} % of a core idle, {run['threads']} threads, "
            f"{run['broker_connections']} broker connections, opened in {run['open_s']} s, "
            f"RSS {run['rss_mb']} MB, broker {run['broker_cpu_pct_of_one_core']} % of a core\n"
        )
    sys.stdout.write(f"broker without watches: {idle} % of a core\n")
    sys.stdout.write(f"load average {load_start} on {available_cores()} cores\nresults: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
