"""``airflow`` commands of the tests, each test's Airflow started once (see ``sandbox/warm_cli.py``).

``run_airflow(env, *args)`` is ``subprocess.run(["airflow", *args], env=env, cwd=REPO, ...)`` without the
Airflow start-up after the first command of an ``AIRFLOW_HOME``: about 4 s of CPU per command, and about 14 s
per ``airflow dags test``. ``tests/conftest.py`` ends every warm process after each test. Commands that a
test signals or kills as their own process stay plain subprocesses.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from airflow_kafka_retry.sandbox.warm_cli import WarmAirflowCli

REPO = Path(__file__).parents[2]
_RUNNING: dict[str, WarmAirflowCli] = {}


def run_airflow(env: Mapping[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``airflow *args`` in the warm Airflow process of ``env`` (one per ``AIRFLOW_HOME`` and environment)."""
    home = env["AIRFLOW_HOME"]
    cli = _RUNNING.get(home)
    if cli is not None and cli.env != dict(env):  # the test changed the environment: a new process
        cli.close()
        cli = None
    if cli is None:
        cli = _RUNNING[home] = WarmAirflowCli(env=env, cwd=REPO)
    return cli.run(*args, timeout=timeout)


def end_all() -> None:
    """End every warm Airflow process (and what it started)."""
    while _RUNNING:
        _, cli = _RUNNING.popitem()
        cli.close()
