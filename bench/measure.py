"""Run one case in a child process and measure it: wall time, CPU, peak RSS of its process tree."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
_SAMPLE_S = 0.05


class CaseFailed(RuntimeError):
    """A case's child process failed; the message holds the tail of its output."""


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += member.memory_info().rss
    return total


def _cpu_s(pids: Sequence[int]) -> float | None:
    """The CPU seconds ``pids`` spent so far, together (None: no pid, or one is gone)."""
    if not pids:
        return None
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            return None
        total += times.user + times.system
    return total


def run_case(
    case: str,
    spec: dict[str, Any],
    *,
    timeout_s: float = 1200,
    broker_pids: Sequence[int] = (),
) -> dict[str, Any]:
    """
    Run ``case`` in ``python -m bench.cases``; return its JSON line plus ``peak_rss_mb`` of its tree.

    With ``broker_pids``, also ``broker_cpu_s``: the CPU those broker processes spent meanwhile.
    """
    broker_before = _cpu_s(broker_pids)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.cases", case, json.dumps(spec)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        process = psutil.Process(child.pid)
        while not done.wait(_SAMPLE_S):
            try:
                peak[0] = max(peak[0], _tree_rss(process))
            except psutil.NoSuchProcess:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise CaseFailed(
            f"case {case} did not finish within {timeout_s:.0f}s; stderr:\n{err[-3000:]}"
        ) from None
    finally:
        done.set()
        sampler.join()
    if child.returncode != 0 or not out.strip():
        raise CaseFailed(f"case {case} exited with {child.returncode}; stderr:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - started, 3)
    broker_after = _cpu_s(broker_pids)
    if broker_before is not None and broker_after is not None:
        result["broker_cpu_s"] = round(broker_after - broker_before, 3)
    result["peak_rss_mb"] = round(max(peak[0] / 2**20, result["self_peak_rss_mb"]), 1)
    return result
