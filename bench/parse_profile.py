"""
Where a DAG file's parse goes, for ``bench/parse_cost.py``: its phases, and a cProfile of it.

A parse in the DAG processor's child is ``_parse_file`` (the DagBag's import of the file, then
``_serialize_dags``: ``DagSerialization.to_dict`` of each DAG), then the child sends the result to the
manager as one msgpack frame. :func:`timed_parse` runs the same steps and times each: ``serialize`` (the
processor's ``_serialize_dags``), ``frame`` (encoding the result as the child's ``send`` does; its size in
bytes is what the manager then decodes, hashes and writes), and the rest, ``import`` (running the DAG
file: building the DAGs). With ``profile_to`` it runs under cProfile and dumps the stats there;
:func:`profile_summary` merges the dumps of a case into its costliest functions per topology.
Profiling slows a parse: a profiled run's times are not the measured ones.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def timed_parse(path: Path, log: Any, profile_to: Path | None = None) -> tuple[Any, bytes, dict[str, Any]]:
    """``_parse_file`` of ``path``, the result's frame, and each phase's CPU and wall seconds."""
    from airflow.dag_processing import processor
    from airflow.sdk.execution_time.comms import _RequestFrame

    phases: dict[str, Any] = {}
    serialize = processor._serialize_dags

    def timed_serialize(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return serialize(*args, **kwargs)
        finally:
            phases["serialize_cpu_s"] = time.process_time() - cpu
            phases["serialize_wall_s"] = time.perf_counter() - wall

    processor._serialize_dags = timed_serialize  # this child only: it exits after the parse
    profiler = cProfile.Profile() if profile_to is not None else None
    if profiler is not None:
        profiler.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    msg = processor.DagFileParseRequest(file=str(path), bundle_path=path.parent, bundle_name="bench")
    result = processor._parse_file(msg, log)
    frame_cpu = time.process_time()
    frame = bytes(_RequestFrame(id=0, body=result.model_dump()).as_bytes()) if result is not None else b""
    phases["frame_cpu_s"] = time.process_time() - frame_cpu
    phases["frame_bytes"] = len(frame)
    phases["cpu_s"] = time.process_time() - cpu
    phases["wall_s"] = time.perf_counter() - wall
    if profiler is not None and profile_to is not None:
        profiler.disable()
        profiler.dump_stats(str(profile_to))
    phases["import_cpu_s"] = phases["cpu_s"] - phases.get("serialize_cpu_s", 0.0) - phases["frame_cpu_s"]
    return result, frame, phases


def profile_summary(dumps: Iterable[Path], topologies: int, top: int = 25) -> dict[str, Any]:
    """The costliest functions of a case's parses (merged dumps), by own and by cumulative time."""
    files = [str(p) for p in dumps if p.is_file()]
    if not files:
        return {}
    stats = pstats.Stats(*files)
    rows = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}

    def row(key: tuple[str, int, str], value: tuple[Any, ...]) -> dict[str, Any]:
        _, calls, own, cumulative, _ = value
        return {
            "function": _name(key),
            "calls_per_topology": round(calls / topologies, 1),
            "own_ms_per_topology": round(1000 * own / topologies, 3),
            "cumulative_ms_per_topology": round(1000 * cumulative / topologies, 3),
        }

    by_own = sorted(rows.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    by_cumulative = sorted(rows.items(), key=lambda kv: kv[1][3], reverse=True)[: 2 * top]
    return {
        "total_ms_per_topology": round(1000 * stats.total_tt / topologies, 2),  # type: ignore[attr-defined]
        "by_own_time": [row(k, v) for k, v in by_own],
        "by_cumulative_time": [row(k, v) for k, v in by_cumulative],
    }


def _name(key: tuple[str, int, str]) -> str:
    """``package/module.py:line(function)``, the path cut at ``site-packages`` or the repository."""
    file, line, function = key
    for marker in ("site-packages/", "airflow_kafka_retry/", "/dags/"):
        if marker in file:
            file = (marker if marker != "site-packages/" else "") + file.split(marker, 1)[1]
            break
    return f"{file}:{line}({function})"
