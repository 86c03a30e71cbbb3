"""``AirflowCluster`` (``sandbox/airflow_stack.py``) leaves no process behind on a failure (issue 38 item 13).

The components are a fake ``airflow`` (a shell script: the api-server is Python's ``http.server`` on the
deployment's port, every other component sleeps), so these run in a second, with no Airflow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster
from airflow_kafka_retry.sandbox.processes import ManagedProcess, free_port

FAKE_AIRFLOW = """#!/bin/sh
echo $$ > "$AIRFLOW_HOME/$1.pid"
case "$1" in
  api-server) exec {python} -m http.server --bind 127.0.0.1 "$AIRFLOW__API__PORT" ;;
  *) exec sleep 600 ;;
esac
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(pids: list[int], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


def _kill(pids: list[int]) -> None:
    """Clean up after a failed assertion: what the harness left, by pid."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cluster(home: Path, components: tuple[str, ...], **kwargs: object) -> AirflowCluster:
    fake = home / "airflow"
    fake.write_text(FAKE_AIRFLOW.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": os.environ["PATH"], "AIRFLOW_HOME": str(home), "AIRFLOW__API__PORT": str(free_port())}
    cluster = AirflowCluster(home, env, migrated=True, components=components, **kwargs)  # type: ignore[arg-type]
    cluster.airflow = str(fake)
    return cluster


def _pids(home: Path, count: int) -> list[int]:
    """The pids the fake wrote, once all ``count`` of them are there (a component writes its own at start)."""
    deadline = time.monotonic() + 15
    while True:
        files = [p.read_text().strip() for p in sorted(home.glob("*.pid"))]
        if (len(files) >= count and all(files)) or time.monotonic() > deadline:
            return [int(f) for f in files if f]
        time.sleep(0.05)


def test_a_failed_start_stops_what_it_had_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []  # from the harness itself: a process stopped before it ran may write no pid file
    real_start = ManagedProcess.start

    def start(self: ManagedProcess) -> ManagedProcess:
        real_start(self)
        if self.pid is not None:
            started.append(self.pid)
        return self

    monkeypatch.setattr(ManagedProcess, "start", start)
    cluster = _cluster(
        tmp_path,
        ("api-server", "scheduler", "dag-processor"),
        component_env={"dag-processor": {"BROKEN": "a\0b"}},  # Popen refuses it: the third start fails
    )
    with pytest.raises(ValueError, match="null byte"), cluster:
        pass
    try:
        assert len(started) == 2, "the api-server and the scheduler were started"
        assert _gone(started), f"a failed start left {[p for p in started if _alive(p)]} running"
    finally:
        _kill(started)


def test_a_failed_killpg_still_stops_every_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(tmp_path, ("api-server", "scheduler", "triggerer"))
    cluster.start(cluster.components)
    pids = _pids(tmp_path, 3)
    assert len(pids) == 3
    real_killpg, failed = os.killpg, []

    def killpg(pgid: int, sig: int) -> None:
        if not failed:  # the first group signal fails (a group it may not signal, say)
            failed.append(pgid)
            raise PermissionError(1, "Operation not permitted")
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    try:
        with contextlib.suppress(PermissionError):
            cluster.stop()
        assert failed
        assert _gone(pids), f"a failed killpg left {[p for p in pids if _alive(p)]} running"
    finally:
        monkeypatch.undo()
        _kill(pids)
