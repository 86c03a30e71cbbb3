"""The results document (``bench/results/<date>.json``): rows per workload, the targets, markdown tables."""

from __future__ import annotations

from typing import Any

#: With Spring's headers: the engine's defaults against the single-process raw loop that reads headers.
TARGET_VS_RAW_HEADERS = 1.3
#: Headerless: the engine's defaults against the raw loop (what it reached before worker processes).
TARGET_HEADERLESS_VS_RAW = 0.86
#: Peak RSS of the engine's whole process tree (engine and workers), MB.
TARGET_RSS_MB = 400.0
#: "Flat": the sweep's largest drain may take at most this much more peak RSS than its smallest.
FLAT_RSS_GROWTH = 1.25

LABELS = {
    "raw": "raw loop: confluent-kafka consume, produce the 1 % with a header, commit",
    "raw_headers": "raw loop + `Message.headers()` per record (single-process limit of a due-aware drain)",
    "provider": "Kafka provider `ConsumeFromTopicOperator` + `apply_function` producing the 1 %",
    "local_txn": "local engine, defaults (transactions on, parallelism {parallelism} over worker processes)",
    "local_no_txn": "local engine, `--no-transactions` (parallelism {parallelism} over worker processes)",
    "local_threads": "local engine, in-process (`in_process=True`: {parallelism} threads, one GIL)",
    "spark": "Spark engine, `local[2]`, whole `spark-submit`",
    "spark_without_startup": "Spark engine, `local[2]`, without its fixed start-up ({startup_s:.1f} s)",
}
ORDER = ("raw", "raw_headers", "provider", "local_txn", "local_no_txn", "local_threads", "spark")


def rate(records: int, seconds: float) -> float:
    return round(records / seconds, 1) if seconds > 0 else 0.0


def case_rows(cases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """
    One row per case: rec/s, ratio to the raw loop, wall time, peak RSS of the case's process tree.

    Spark's row without its fixed start-up counts the partition tasks' own time (summed, divided
    by the two slots of ``local[2]``); the start-up is the rest of the ``spark-submit`` wall time.
    """
    raw_rate = rate(cases["raw"]["records"], cases["raw"]["wall_s"]) if "raw" in cases else None
    rows = []
    for name in ORDER:
        if name not in cases:
            continue
        result = cases[name]
        rows.append(_row(name, result, result["wall_s"], raw_rate, result))
        if name == "spark" and result.get("tasks_s"):
            rows.append(
                _row(
                    "spark_without_startup",
                    result,
                    result["tasks_s"],
                    raw_rate,
                    {**result, "startup_s": result["wall_s"] - result["tasks_s"]},
                )
            )
    return rows


def _row(
    name: str, result: dict[str, Any], seconds: float, raw_rate: float | None, fmt: dict[str, Any]
) -> dict[str, Any]:
    records_per_s = rate(result["records"], seconds)
    return {
        "case": name,
        "label": LABELS[name].format(**{"parallelism": "?", "startup_s": 0.0, **fmt}),
        "records": result["records"],
        "wall_s": round(seconds, 3),
        "records_per_s": records_per_s,
        "ratio_to_raw": round(records_per_s / raw_rate, 3) if raw_rate else None,
        "peak_rss_mb": result["peak_rss_mb"],
    }


def _ratio(rows: dict[str, dict[str, Any]], case: str, reference: str) -> float | None:
    if case not in rows or reference not in rows or not rows[reference]["records_per_s"]:
        return None
    return round(rows[case]["records_per_s"] / rows[reference]["records_per_s"], 3)


def targets(
    spring: list[dict[str, Any]], headerless: list[dict[str, Any]], sweep: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each target of the bench: what was measured, the bound, and whether it is met."""
    s = {row["case"]: row for row in spring}
    h = {row["case"]: row for row in headerless}
    found: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, bound: float, *, at_most: bool = False) -> None:
        met = None if measured is None else (measured <= bound if at_most else measured >= bound)
        found.append({"target": name, "measured": measured, "bound": bound, "at_most": at_most, "met": met})

    add(
        "Spring headers: drain defaults / raw loop + headers()",
        _ratio(s, "local_txn", "raw_headers"),
        TARGET_VS_RAW_HEADERS,
    )
    vs_provider = _ratio(s, "local_txn", "provider")
    found.append(
        {
            "target": "Spring headers: drain defaults ahead of the Kafka provider's operator",
            "measured": vs_provider,
            "bound": 1.0,
            "at_most": False,
            "met": None if vs_provider is None else vs_provider > 1.0,
        }
    )
    add(
        "Spring headers: peak RSS of the drain's process tree (MB)",
        s.get("local_txn", {}).get("peak_rss_mb"),
        TARGET_RSS_MB,
        at_most=True,
    )
    if len(sweep) >= 2:
        growth = (
            round(sweep[-1]["peak_rss_mb"] / sweep[0]["peak_rss_mb"], 3) if sweep[0]["peak_rss_mb"] else None
        )
        add(
            f"memory flat from {sweep[0]['records']:,} to {sweep[-1]['records']:,} records (peak RSS growth)",
            growth,
            FLAT_RSS_GROWTH,
            at_most=True,
        )
        add(
            "sweep: largest peak RSS of the process tree (MB)",
            max(p["peak_rss_mb"] for p in sweep),
            TARGET_RSS_MB,
            at_most=True,
        )
    add(
        "headerless: drain defaults / raw loop",
        h.get("local_txn", {}).get("ratio_to_raw"),
        TARGET_HEADERLESS_VS_RAW,
    )
    return found


#: A 1-minute load average at the start at least this high means the cores were shared with other work.
SHARED_LOAD = 0.5
#: CPU time of the case's process tree and the broker over wall time, as a share of the machine's cores, from
#: which the drain is said to be bound by the cores rather than by waiting.
CPU_BOUND_SHARE = 0.8


def _bound(engine: dict[str, Any] | None, machine: dict[str, Any]) -> str:
    """What bounded the local engine's rate: its process tree's and the broker's CPU against its wall time."""
    cores = machine.get("cores")
    load = (machine.get("load_average") or [None])[0]
    where = f"on {cores} core(s)" if cores else "on this machine"
    if load is not None and load >= SHARED_LOAD:
        where += f", shared with other work (load average {load:.1f} at the start)"
    if not engine or not engine.get("wall_s") or engine.get("cpu_s") is None:
        return f"It ran {where}."
    wall, cpu, broker = engine["wall_s"], engine["cpu_s"], engine.get("broker_cpu_s")
    busy = (cpu + (broker or 0.0)) / wall
    measured = (
        f"its process tree used {cpu:.1f} s of CPU in {wall:.1f} s"
        + (f" and the broker {broker:.1f} s" if broker is not None else "")
        + f" ({busy:.2f} cores busy)"
    )
    if cores and busy >= CPU_BOUND_SHARE * cores:
        return f"It ran {where}; {measured}: the cores, not the GIL or the broker's answers, bound its rate."
    return (
        f"It ran {where}; {measured}: for the rest it waited (on the broker's answers, or for cores "
        "taken by other work)."
    )


def _transaction_cost(by_case: dict[str, dict[str, Any]]) -> str:
    """What transactions (init_transactions per partition, a commit per chunk) cost: the two local cases."""
    txn, plain = by_case.get("local_txn"), by_case.get("local_no_txn")
    if not txn or not plain or not plain["records_per_s"]:
        return ""
    rates = f"{txn['records_per_s']:,.0f} rec/s with them, {plain['records_per_s']:,.0f} without"
    cost = 1 - txn["records_per_s"] / plain["records_per_s"]
    if cost <= 0:
        return (
            f"Transactions (init_transactions per partition, a commit per chunk) cost no rate here ({rates})."
        )
    return (
        f"Transactions (init_transactions per partition, a commit per chunk) cost {cost:.0%} of the rate "
        f"here ({rates})."
    )


def _processes_against_threads(by_case: dict[str, dict[str, Any]]) -> str:
    """What the worker processes bought: the defaults against the same drain in one process."""
    procs, threads = by_case.get("local_txn"), by_case.get("local_threads")
    if not procs or not threads or not threads["records_per_s"]:
        return ""
    gain = procs["records_per_s"] / threads["records_per_s"]
    return (
        f"Worker processes drained at {gain:.2f}x the rate of the same engine in one process "
        f"({procs['records_per_s']:,.0f} against {threads['records_per_s']:,.0f} rec/s)."
    )


def verdict(
    spring: list[dict[str, Any]],
    headerless: list[dict[str, Any]],
    sweep: list[dict[str, Any]],
    profile: dict[str, Any] | None,
    cases: dict[str, dict[str, Any]],
    machine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """
    The targets, CPU per record, and (when a target is missed) where the time went.

    Every statement about the run (cores, load, what bounds the rate, what transactions and worker
    processes change) is derived from this run's measurements (``machine``, ``cases``, the rows).
    """
    found = targets(spring, headerless, sweep)
    cpu = {
        name: round(cases[name]["cpu_s"] / cases[name]["records"] * 1e6, 2)
        for name in ("raw", "raw_headers", "provider", "local_txn", "local_no_txn", "local_threads")
        if name in cases and cases[name]["records"]
    }
    result: dict[str, Any] = {
        "targets": found,
        "met": all(t["met"] for t in found),
        "cpu_us_per_record_spring": cpu,
    }
    broker = {
        name: round(cases[name]["broker_cpu_s"] / cases[name]["records"] * 1e6, 2)
        for name in cpu
        if cases[name].get("broker_cpu_s") is not None
    }
    if broker:
        result["broker_cpu_us_per_record_spring"] = broker
    missed = [t for t in found if t["met"] is False]
    if missed and profile:
        by_case = {row["case"]: row for row in spring}
        phases = profile.get("phases", {})
        shares = ", ".join(
            f"{name} {p['wall_s']:.1f} s wall / {p['thread_cpu_s']:.1f} s CPU"
            for name, p in phases.items()
            if name != "job"
        )
        top = profile.get("top_functions", [])
        listed = ", ".join(f"{f['function']} {f['own_s']:.2f} s" for f in top[:8])
        result["where_the_time_goes"] = (
            "Missed: "
            + "; ".join(
                f"{t['target']}: {t['measured']} (target {'<=' if t['at_most'] else '>='} {t['bound']})"
                for t in missed
            )
            + ". "
            f"{_bound(cases.get('local_txn'), machine or {})} {_processes_against_threads(by_case)} "
            f"{_transaction_cost(by_case)} "
            f"CPU per record with Spring's headers (us, process tree): {cpu}"
            + (f"; the broker's, per case: {broker}" if broker else "")
            + ". "
            f"Profile of the partition work (in-process, under cProfile): {shares}; top own times: {listed}."
        )
    return result


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| case | rec/s | ratio to the raw loop | wall s | peak RSS MB (process tree) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = f"{row['ratio_to_raw']:.2f}" if row["ratio_to_raw"] is not None else "-"
        lines.append(
            f"| {row['label']} | {row['records_per_s']:,.0f} | {ratio} | {row['wall_s']:.1f} | "
            f"{row['peak_rss_mb']:.0f} |"
        )
    return lines


def markdown(
    spring: list[dict[str, Any]],
    headerless: list[dict[str, Any]],
    sweep: list[dict[str, Any]],
    workload: dict[str, Any],
    found: list[dict[str, Any]],
) -> str:
    lines = [
        (
            f"{workload['records']:,} records of 1 KB, {workload['partitions']} partitions, all due, "
            "1 % failing (half transient, half fatal); every case reads the same tier with its own consumer "
            "group."
        ),
        "",
        (
            "**With Spring's 13 headers** (`kafka_original-*`, `kafka_exception-*` with a 20-line stack "
            "trace, `retry_topic-*`):"
        ),
        "",
        *_table(spring),
    ]
    if headerless:
        lines += ["", "**Headerless** (the same records without headers):", "", *_table(headerless)]
    if sweep:
        lines += [
            "",
            "Memory against drain size (local engine, defaults, Spring's headers, one run per size):",
            "",
            "| records drained | rec/s | wall s | peak RSS MB (process tree) |",
            "|---|---|---|---|",
        ]
        for point in sweep:
            lines.append(
                f"| {point['records']:,} | {point['records_per_s']:,.0f} | {point['wall_s']:.1f} | "
                f"{point['peak_rss_mb']:.0f} |"
            )
    if found:
        lines += ["", "| target | measured | bound | met |", "|---|---|---|---|"]
        for t in found:
            met = "-" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append(
                f"| {t['target']} | {t['measured']} | {'<=' if t['at_most'] else '>='} {t['bound']} | {met} |"
            )
    return "\n".join(lines) + "\n"
