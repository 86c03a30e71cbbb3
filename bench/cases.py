"""
The bench cases. Each one runs in a child process of its own: ``python -m bench.cases CASE SPEC``.

The child reads the workload description (JSON) from SPEC, runs the case with its own consumer
group, and prints one JSON line: records read, wall time of the case (clients created to last
commit), its own peak RSS (``VmHWM``) and case details. The parent (:mod:`bench.measure`)
also samples the RSS of the child's whole process tree, which is what counts for Spark.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.workload import Workload

#: Spark properties of the bench (as in the test suite: no UI, a small driver).
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "512m",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    "spark.python.worker.reuse": "true",
}


SPARK_SLOTS = 2  # local[2]


def _config(workload: Workload, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Kafka configuration of a case: the broker, plus the spec's ``kafka`` settings (experiments)."""
    return {"bootstrap.servers": workload.bootstrap, **((spec or {}).get("kafka") or {})}


def _engine_options(group: str, spec: dict[str, Any], *, transactional: bool) -> Any:
    from airflow_kafka_retry.engine.drain.options import DrainOptions

    return DrainOptions(
        handler="bench.handler:handle",
        consumer_group=group,
        transactional=transactional,
        max_records=spec.get("max_records"),
        **(spec.get("options") or {}),
    )


def _summary_details(summary: Any) -> tuple[int, dict[str, Any]]:
    data = summary.to_dict()
    if data["status"] != "ok":
        failed = [(p["partition"], p["error"]) for p in data["partitions"] if p["status"] != "ok"]
        raise RuntimeError(f"the drain failed: {failed}")
    totals = data["totals"]
    return totals["drained"], {
        "totals": totals,
        "transactions": sum(p["transactions"] for p in data["partitions"]),
    }


def raw(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from bench.raw import run_raw_loop

    return run_raw_loop(workload, group), {}


def raw_headers(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from bench.raw import run_raw_loop

    return run_raw_loop(workload, group, read_headers=True), {}


def provider(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from bench.provider import run_provider_operator

    return run_provider_operator(workload, group)


def _local(
    workload: Workload, group: str, spec: dict[str, Any], *, transactional: bool, in_process: bool = False
) -> tuple[int, dict[str, Any]]:
    from airflow_kafka_retry.engine.local.engine import default_parallelism, run_local
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(workload.topology_path)
    parallelism = spec.get("parallelism")
    summary = run_local(
        topology,
        topology.tier(1),
        _config(workload, spec),
        _engine_options(group, spec, transactional=transactional),
        parallelism=parallelism,
        in_process=in_process,
    )
    count, details = _summary_details(summary)
    details["parallelism"] = parallelism or default_parallelism(workload.partitions)
    return count, details


def local_txn(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return _local(workload, group, spec, transactional=True)


def local_no_txn(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return _local(workload, group, spec, transactional=False)


def local_threads(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The engine's defaults with partitions in threads of one process (``in_process=True``), as before."""
    return _local(workload, group, spec, transactional=True, in_process=True)


def spark(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The Spark engine on ``local[2]``; with ``spec["cutoff_ms"] = 0`` nothing is due (start-up only)."""
    from airflow_kafka_retry.spark.submit import run_spark_submit

    summary = run_spark_submit(
        topology_path=workload.topology_path,
        tier=1,
        options=_engine_options(group, spec, transactional=True),
        kafka_config=_config(workload),
        master=f"local[{SPARK_SLOTS}]",
        cutoff_ms=spec.get("cutoff_ms"),
        conf=SPARK_CONF,
        env={"SPARK_LOCAL_IP": "127.0.0.1"},
    )
    count, details = _summary_details(summary)
    details["driver_s"] = round((summary.finished_ms - summary.started_ms) / 1000, 3)
    # the partition tasks' own time, two at a time on local[2]: the run without its fixed start-up
    # (JVM, SparkContext, Python workers, the driver's checks)
    details["tasks_s"] = round(sum(p.duration_s for p in summary.partitions) / SPARK_SLOTS, 3)
    return count, details


def local_txn_profile(workload: Workload, group: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from bench.profile import profile_local

    return profile_local(workload, group, spec, local_threads)


CASES: dict[str, Callable[[Workload, str, dict[str, Any]], tuple[int, dict[str, Any]]]] = {
    "raw": raw,
    "raw_headers": raw_headers,
    "provider": provider,
    "local_txn": local_txn,
    "local_no_txn": local_no_txn,
    "local_threads": local_threads,
    "spark": spark,
    "local_txn_profile": local_txn_profile,
}


def _peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``; ``ru_maxrss`` would include the parent's RSS at fork time)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    case, spec_text = argv
    spec = json.loads(spec_text)
    workload = Workload(**spec["workload"])
    started = time.perf_counter()
    count, details = CASES[case](workload, spec["group"], spec)
    wall = time.perf_counter() - started
    # the case's own CPU and its reaped children's (the engine's worker processes, spark-submit)
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    sys.stdout.write(
        json.dumps(
            {
                "case": case,
                "records": count,
                "wall_s": round(wall, 3),
                "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage), 3),
                "self_peak_rss_mb": _peak_rss_mb(),
                **details,
            }
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
