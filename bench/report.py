"""The results document (``bench/results/<date>.json``) and its markdown tables."""

from __future__ import annotations

from typing import Any

TARGET_RATIO = 0.8

LABELS = {
    "raw": "raw loop: confluent-kafka consume, produce the 1 % with a header, commit",
    "provider": "Kafka provider `ConsumeFromTopicOperator` + `apply_function` producing the 1 %",
    "local_txn": "local engine, defaults (transactions on, parallelism {parallelism})",
    "local_no_txn": "local engine, `--no-transactions` (parallelism {parallelism})",
    "spark": "Spark engine, `local[2]`, whole `spark-submit`",
    "spark_without_startup": "Spark engine, `local[2]`, without its fixed start-up ({startup_s:.1f} s)",
}


def rate(records: int, seconds: float) -> float:
    return round(records / seconds, 1) if seconds > 0 else 0.0


def case_rows(cases: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case: rec/s, ratio to the raw loop, wall time, peak RSS.

    Spark's row without its fixed start-up counts the partition tasks' own time (summed, divided
    by the two slots of ``local[2]``); the start-up is the rest of the ``spark-submit`` wall time.
    """
    raw_rate = rate(cases["raw"]["records"], cases["raw"]["wall_s"]) if "raw" in cases else None
    rows = []
    for name in ("raw", "provider", "local_txn", "local_no_txn", "spark"):
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


def verdict(rows: list[dict[str, Any]], profile: dict[str, Any] | None, cases: dict[str, dict[str, Any]],
            header_count: int, machine: dict[str, Any]) -> dict[str, Any]:
    """Whether the local engine reached the target, and (if not) what the profile says the time went to.

    Every statement about the run (cores, load, what bounds the rate, what transactions cost) is derived
    from this run's measurements (``machine``, ``cases``, the rows), never assumed.
    """
    by_case = {row["case"]: row for row in rows}
    engine, provider = by_case.get("local_txn"), by_case.get("provider")
    result: dict[str, Any] = {"target_ratio": TARGET_RATIO}
    if engine is None:
        return result
    result["local_engine_ratio"] = engine["ratio_to_raw"]
    result["met"] = engine["ratio_to_raw"] is not None and engine["ratio_to_raw"] >= TARGET_RATIO
    if provider is not None and provider["records_per_s"]:
        result["local_engine_vs_provider"] = round(engine["records_per_s"] / provider["records_per_s"], 3)
    cpu = {name: round(cases[name]["cpu_s"] / cases[name]["records"] * 1e6, 2)
           for name in ("raw", "local_txn", "local_no_txn") if name in cases and cases[name]["records"]}
    result["cpu_us_per_record"] = cpu
    if not result["met"] and profile:
        phases = profile.get("phases", {})
        job = phases.get("job", {}).get("wall_s") or 0.0
        shares = ", ".join(f"{name} {p['wall_s']:.1f} s wall / {p['thread_cpu_s']:.1f} s CPU"
                           for name, p in phases.items() if name != "job")
        top = profile.get("top_functions", [])
        headers = next((f for f in top if "'headers'" in f["function"]), None)
        header_note = (f" In the profile, confluent-kafka's Message.headers() alone takes {headers['own_s']:.1f} s "
                       f"of own time ({headers['calls']:,} calls)." if headers else "")
        listed = ", ".join(f"{f['function']} {f['own_s']:.2f} s" for f in top[:6])
        result["what_prevents_it"] = (
            f"The local engine reached {engine['ratio_to_raw']:.2f}x of the raw loop, not {TARGET_RATIO}x. "
            f"CPU per record: raw loop {cpu.get('raw', 0):.1f} us, local engine {cpu.get('local_txn', 0):.1f} us "
            "(transactions) and "
            f"{cpu.get('local_no_txn', 0):.1f} us (none). The engine must read every record's headers to know "
            "whether it is due and which attempt it is on; confluent-kafka turns all of a record's headers "
            f"({header_count} here, as the engine and Spring write them) into Python objects at once, and the raw loop "
            f"never asks for them.{header_note} That work holds the GIL. "
            f"{_bound(cases.get('local_txn'), machine)} {_transaction_cost(by_case)} "
            f"Partition threads spent {job:.1f} s in their jobs: {shares}. Top own times under cProfile: "
            f"{listed}. See 'profile' for the whole profile.")
    return result


#: A 1-minute load average at the start at least this high means the cores were shared with other work.
SHARED_LOAD = 0.5
#: CPU time over wall time (in cores) from which the engine is said to be bound by its own CPU: the GIL lets
#: its Python code use about one core.
CPU_BOUND_CORES = 0.8


def _bound(engine: dict[str, Any] | None, machine: dict[str, Any]) -> str:
    """What bounded the local engine's rate, from its process's CPU time against its wall time."""
    cores = machine.get("cores")
    load = (machine.get("load_average") or [None])[0]
    where = f"on {cores} core(s)" if cores else "on this machine"
    if load is not None and load >= SHARED_LOAD:
        where += f", shared with other work (load average {load:.1f} at the start)"
    if not engine or not engine.get("wall_s") or engine.get("cpu_s") is None:
        return f"It ran {where}."
    busy = engine["cpu_s"] / engine["wall_s"]
    measured = (f"its process used {engine['cpu_s']:.1f} s of CPU in {engine['wall_s']:.1f} s "
                f"({busy:.2f} cores busy)")
    if busy >= CPU_BOUND_CORES:
        return f"It ran {where}; {measured}, so its own CPU, not the broker, bounds its rate."
    return f"It ran {where}; {measured}, so for the rest it waited, on the broker or on I/O, not on its CPU."


def _transaction_cost(by_case: dict[str, dict[str, Any]]) -> str:
    """What transactions (init_transactions per partition, a commit per chunk) cost: the two local cases."""
    txn, plain = by_case.get("local_txn"), by_case.get("local_no_txn")
    if not txn or not plain or not plain["records_per_s"]:
        return ""
    rates = f"{txn['records_per_s']:,.0f} rec/s with them, {plain['records_per_s']:,.0f} without"
    cost = 1 - txn["records_per_s"] / plain["records_per_s"]
    if cost <= 0:
        return (f"Transactions (init_transactions per partition, a commit per chunk) cost no rate here "
                f"({rates}).")
    return (f"Transactions (init_transactions per partition, a commit per chunk) cost {cost:.0%} of the rate "
            f"here ({rates}).")


def markdown(rows: list[dict[str, Any]], sweep: list[dict[str, Any]], workload: dict[str, Any]) -> str:
    lines = [f"{workload['records']:,} records of 1 KB, {workload['partitions']} partitions, all due, 1 % failing "
             "(half transient, half fatal); every case reads the same tier with its own consumer group.", "",
             "| case | rec/s | ratio to the raw loop | wall s | peak RSS MB |", "|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{row['ratio_to_raw']:.2f}" if row["ratio_to_raw"] is not None else "-"
        lines.append(f"| {row['label']} | {row['records_per_s']:,.0f} | {ratio} | {row['wall_s']:.1f} | "
                     f"{row['peak_rss_mb']:.0f} |")
    if sweep:
        lines += ["", "Memory against drain size (local engine, defaults, one process per size):", "",
                  "| records drained | rec/s | wall s | peak RSS MB |", "|---|---|---|---|"]
        for point in sweep:
            lines.append(f"| {point['records']:,} | {point['records_per_s']:,.0f} | {point['wall_s']:.1f} | "
                         f"{point['peak_rss_mb']:.0f} |")
    return "\n".join(lines) + "\n"
