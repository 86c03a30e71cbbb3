"""Spark standalone cluster fixtures (a pytest plugin, loaded by tests/conftest.py).

* ``spark_cluster`` -- one Spark standalone cluster (a master, two workers of 1 core and 1 GB,
  ``testkit/spark_cluster.py``) per test module, stopped after the module: the
  integration tests share one; the fault tests, which kill its executors and workers, get their own.
  Its start time goes to the terminal summary (speed targets live in ``bench/``, not in assertions).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testkit.spark_cluster import SparkCluster

_STARTS_KEY = pytest.StashKey[list[str]]()


@pytest.fixture(scope="module")
def spark_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkCluster]:
    # a start deadline with room for a loaded machine (the default 90 s is not, at three workers per core)
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), ready_timeout=180) as cluster:
        request.config.stash.setdefault(_STARTS_KEY, []).append(
            f"{request.node.name}: {cluster.master_url}, {cluster.worker_count} workers, "
            f"ready in {cluster.start_seconds:.1f}s, folders {cluster.base_dir}"
        )
        yield cluster


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_STARTS_KEY, [])
    if lines:
        terminalreporter.section("spark standalone clusters")
        for line in lines:
            terminalreporter.write_line(line)
