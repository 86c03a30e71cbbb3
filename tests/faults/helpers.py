"""Shared steps of the fault cases: run tiers in-process or through the CLI, summarise what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Topology

REPO = Path(__file__).parents[2]
HANDLER = "tests.support.fault_handler"


def options(handler: str = "indexed", **overrides) -> DrainOptions:
    settings = {"handler": f"{HANDLER}:{handler}", "batch_size": 10, "chunk_size": 50, **overrides}
    return DrainOptions(**settings)


def run_all_tiers(topology: Topology, config: dict, opts: DrainOptions) -> list[RunSummary]:
    """Every tier once, in order; each run must succeed on every partition."""
    summaries = []
    for tier in topology.tiers:
        summary = run_local(topology, tier, config, opts)
        assert summary.ok, json.dumps(summary.to_dict()["partitions"], indent=1)[:3000]
        summaries.append(summary)
    return summaries


def totals(summaries: list[RunSummary]) -> dict:
    """Drained / succeeded / routed-to-DLT counts over several runs."""
    out = {"drained": 0, "succeeded": 0, "dlt": 0, "routed": 0}
    for s in summaries:
        t = s.totals()
        out["drained"] += t["drained"]
        out["succeeded"] += t["succeeded"]
        out["routed"] += sum(t["routed"].values())
        out["dlt"] += sum(t["dead_lettered"].values())
    return out


def cli_env(tmp_path: Path, ledger_file: str, **extra: str) -> dict:
    kill_dir = tmp_path / "markers"
    kill_dir.mkdir(exist_ok=True)
    return {
        **os.environ,
        "AKR_LEDGER": ledger_file,
        "AKR_KILL_DIR": str(kill_dir),
        "PYTHONPATH": str(REPO),
        **extra,
    }


def cli_drain_cmd(
    topology_file: Path,
    tier: int,
    bootstrap: str,
    *extra: str,
    handler: str = "indexed",
    module: str = "airflow_kafka_retry.cli",
) -> list[str]:
    return [
        sys.executable,
        "-m",
        module,
        "drain",
        "--topology",
        str(topology_file),
        "--tier",
        str(tier),
        "--handler",
        f"{HANDLER}:{handler}",
        "--batch-size",
        "10",
        "--chunk-size",
        "50",
        "--bootstrap",
        bootstrap,
        *extra,
    ]


def cli_drain(
    topology_file: Path,
    tier: int,
    bootstrap: str,
    env: dict,
    *extra: str,
    handler: str = "indexed",
    module: str = "airflow_kafka_retry.cli",
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cli_drain_cmd(topology_file, tier, bootstrap, *extra, handler=handler, module=module),
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def cli_summary(done: subprocess.CompletedProcess) -> dict:
    assert done.stdout.strip(), f"no summary printed (exit {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout)
