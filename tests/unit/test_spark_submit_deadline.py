"""``run_spark_submit`` waits for ``spark-submit`` within a deadline it enforces (issue 38, item 10).

It used to wait with no limit. Now it gives up after ``timeout_s`` (by default the run's own deadline plus
a grace period, or a fixed bound for a run without one), kills spark-submit's whole process group (the
JVM and whatever else it started) and fails naming what it waited for.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from airflow_kafka_retry.spark import running
from airflow_kafka_retry.spark.submit import SparkSubmitError, run_spark_submit

from tests.unit.test_spark_submit import OPTIONS, TOPOLOGY

PLAIN = {"bootstrap.servers": "kafka-1:9092"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not reaped yet
    except FileNotFoundError:
        return False


def _stuck_spark_submit(tmp_path):
    """A spark-submit that prints a line, starts a child in its process group (as the JVM) and never ends."""
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\necho 'starting the app'\nsleep 300 &\necho $! > {pid_file}\nwait\n")
    script.chmod(0o755)
    return script, pid_file


@pytest.mark.timeout(60)
def test_a_stuck_spark_submit_is_killed_at_its_deadline_with_its_process_group(tmp_path):
    script, pid_file = _stuck_spark_submit(tmp_path)
    started = time.monotonic()
    with pytest.raises(SparkSubmitError) as info:
        run_spark_submit(
            topology_path=TOPOLOGY,
            tier=1,
            options=OPTIONS,
            kafka_config=PLAIN,
            spark_submit=str(script),
            result_path=str(tmp_path / "summary.json"),
            timeout_s=2,
        )
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "did not end within 2 s" in message, message
    assert f"tier 1 of {TOPOLOGY}" in message, "names what it waited for"
    assert str(tmp_path / "summary.json") in message, "names the result it waited for"
    assert "starting the app" in message, "with the tail of its output"
    child = int(pid_file.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child), "a process spark-submit started outlived the deadline"


def test_the_default_deadline_is_the_runs_own_plus_a_grace_period():
    now = 1_800_000_000_000
    with_deadline = dataclasses.replace(OPTIONS, deadline_ms=now + 600_000)
    assert running.submit_timeout_s(with_deadline, now_ms=now) == 600 + running.SPARK_SUBMIT_GRACE_S
    past = dataclasses.replace(OPTIONS, deadline_ms=now - 5_000)
    assert running.submit_timeout_s(past, now_ms=now) == running.SPARK_SUBMIT_GRACE_S
    assert OPTIONS.deadline_ms is None
    assert running.submit_timeout_s(OPTIONS, now_ms=now) == running.DEFAULT_SPARK_SUBMIT_TIMEOUT_S
