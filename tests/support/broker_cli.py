"""
``airflow-kafka-retry broker --kafka ...`` in a child process, as a user starts it, and what its tests check.

``test_kafka_broker.py`` (one node), ``test_kafka_cluster.py`` (``--nodes 3``) and
``test_secure_broker_cli.py`` (``--secure``) start the command alike: a fresh interpreter with the checkout
on its path, its output read line by line, and killed if a test leaves it running.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH`` (for the ``tests`` package)."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath}


@contextmanager
def broker_cli(*flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """
    ``airflow-kafka-retry broker --kafka *flags`` running: the process and the first line it printed.

    That line is the bootstrap address (or the command's error, when it is not one: the test reads stderr
    then). On leaving, a process still running is killed and reaped.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_kafka_retry.cli", "broker", "--kafka", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        yield proc, proc.stdout.readline().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, timeout: float = 20) -> bool:
    """Whether ``pid`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not pid_alive(pid)
