"""``airflow-kafka-retry`` run as a user runs it: a fresh interpreter, from the checkout, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m airflow_kafka_retry.cli *args`` in the repository; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_kafka_retry.cli", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
