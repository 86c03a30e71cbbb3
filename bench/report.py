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
    """One row per case: rec/s, ratio to the raw loop, wall time, peak RSS of the case's process tree.

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
            rows.append(_row("spark_without_startup", result, result["tasks_s"], raw_rate,
                             {**result, "startup_s": result["wall_s"] - result["tasks_s"]}))
    return rows


def _row(name: str, result: dict[str, Any], seconds: float, raw_rate: float | None,
         fmt: dict[str, Any]) -> dict[str, Any]:
    records_per_s = rate(result["records"], seconds)
    return {"case": name, "label": LABELS[name].format(**{"parallelism": "?", "startup_s": 0.0, **fmt}),
            "records": result["records"], "wall_s": round(seconds, 3), "records_per_s": records_per_s,
            "ratio_to_raw": round(records_per_s / raw_rate, 3) if raw_rate else None,
            "peak_rss_mb": result["peak_rss_mb"]}


def _ratio(rows: dict[str, dict[str, Any]], case: str, reference: str) -> float | None:
    if case not in rows or reference not in rows or not rows[reference]["records_per_s"]:
        return None
    return round(rows[case]["records_per_s"] / rows[reference]["records_per_s"], 3)


def targets(spring: list[dict[str, Any]], headerless: list[dict[str, Any]],
            sweep: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target of the bench: what was measured, the bound, and whether it is met."""
    s = {row["case"]: row for row in spring}
    h = {row["case"]: row for row in headerless}
    found: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, bound: float, *, at_most: bool = False) -> None:
        met = None if measured is None else (measured <= bound if at_most else measured >= bound)
        found.append({"target": name, "measured": measured, "bound": bound, "at_most": at_most, "met": met})

    add("Spring headers: drain defaults / raw loop + headers()", _ratio(s, "local_txn", "raw_headers"),
        TARGET_VS_RAW_HEADERS)
    vs_provider = _ratio(s, "local_txn", "provider")
    found.append({"target": "Spring headers: drain defaults ahead of the Kafka provider's operator",
                  "measured": vs_provider, "bound": 1.0, "at_most": False,
                  "met": None if vs_provider is None else vs_provider > 1.0})
    add("Spring headers: peak RSS of the drain's process tree (MB)", s.get("local_txn", {}).get("peak_rss_mb"),
        TARGET_RSS_MB, at_most=True)
    if len(sweep) >= 2:
        growth = round(sweep[-1]["peak_rss_mb"] / sweep[0]["peak_rss_mb"], 3) if sweep[0]["peak_rss_mb"] else None
        add(f"memory flat from {sweep[0]['records']:,} to {sweep[-1]['records']:,} records (peak RSS growth)",
            growth, FLAT_RSS_GROWTH, at_most=True)
        add("sweep: largest peak RSS of the process tree (MB)", max(p["peak_rss_mb"] for p in sweep),
            TARGET_RSS_MB, at_most=True)
    add("headerless: drain defaults / raw loop", h.get("local_txn", {}).get("ratio_to_raw"),
        TARGET_HEADERLESS_VS_RAW)
    return found


def verdict(spring: list[dict[str, Any]], headerless: list[dict[str, Any]], sweep: list[dict[str, Any]],
            profile: dict[str, Any] | None, cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The targets, CPU per record, and (when a target is missed) where the profile says the time went."""
    found = targets(spring, headerless, sweep)
    cpu = {name: round(cases[name]["cpu_s"] / cases[name]["records"] * 1e6, 2)
           for name in ("raw", "raw_headers", "provider", "local_txn", "local_no_txn", "local_threads")
           if name in cases and cases[name]["records"]}
    result: dict[str, Any] = {"targets": found, "met": all(t["met"] for t in found),
                              "cpu_us_per_record_spring": cpu}
    missed = [t for t in found if t["met"] is False]
    if missed and profile:
        phases = profile.get("phases", {})
        shares = ", ".join(f"{name} {p['wall_s']:.1f} s wall / {p['thread_cpu_s']:.1f} s CPU"
                           for name, p in phases.items() if name != "job")
        top = profile.get("top_functions", [])
        listed = ", ".join(f"{f['function']} {f['own_s']:.2f} s" for f in top[:8])
        result["where_the_time_goes"] = (
            "Missed: " + "; ".join(f"{t['target']}: {t['measured']} (target {'<=' if t['at_most'] else '>='} "
                                   f"{t['bound']})" for t in missed) + ". "
            f"CPU per record with Spring's headers (us, process tree): {cpu}. "
            f"Profile of the partition work (in-process, under cProfile): {shares}; top own times: {listed}.")
    return result


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| case | rec/s | ratio to the raw loop | wall s | peak RSS MB (process tree) |", "|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{row['ratio_to_raw']:.2f}" if row["ratio_to_raw"] is not None else "-"
        lines.append(f"| {row['label']} | {row['records_per_s']:,.0f} | {ratio} | {row['wall_s']:.1f} | "
                     f"{row['peak_rss_mb']:.0f} |")
    return lines


def markdown(spring: list[dict[str, Any]], headerless: list[dict[str, Any]], sweep: list[dict[str, Any]],
             workload: dict[str, Any], found: list[dict[str, Any]]) -> str:
    lines = [f"{workload['records']:,} records of 1 KB, {workload['partitions']} partitions, all due, 1 % failing "
             "(half transient, half fatal); every case reads the same tier with its own consumer group.", "",
             "**With Spring's 13 headers** (`kafka_original-*`, `kafka_exception-*` with a 20-line stack trace, "
             "`retry_topic-*`):", "", *_table(spring)]
    if headerless:
        lines += ["", "**Headerless** (the same records without headers):", "", *_table(headerless)]
    if sweep:
        lines += ["", "Memory against drain size (local engine, defaults, Spring's headers, one run per size):", "",
                  "| records drained | rec/s | wall s | peak RSS MB (process tree) |", "|---|---|---|---|"]
        for point in sweep:
            lines.append(f"| {point['records']:,} | {point['records_per_s']:,.0f} | {point['wall_s']:.1f} | "
                         f"{point['peak_rss_mb']:.0f} |")
    if found:
        lines += ["", "| target | measured | bound | met |", "|---|---|---|---|"]
        for t in found:
            met = "-" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append(f"| {t['target']} | {t['measured']} | {'<=' if t['at_most'] else '>='} {t['bound']} | {met} |")
    return "\n".join(lines) + "\n"
