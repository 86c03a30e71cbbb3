"""``ManagedProcess.kill`` once its leader was reaped (issue 48 item 8): real processes, no mocks.

After the leader is reaped its pid is free; the system may give it to a new process that leads a group of its
own. Signalling "the group of that pid" then kills a stranger. The case is made by pointing a reaped
leader's ``Popen`` at the pid of a live process of another group (what a reused pid looks like).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from airflow_kafka_retry.sandbox.processes import ManagedProcess

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _wait_gone(proc: subprocess.Popen[bytes], seconds: float = 10.0) -> bool:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_kill_after_the_leader_was_reaped_never_signals_a_group_its_pid_was_given_to(tmp_path: Path) -> None:
    managed = ManagedProcess([sys.executable, "-c", "pass"], log_path=tmp_path / "short.log", name="short")
    managed.start()
    managed.wait(30)  # reaped
    stranger = subprocess.Popen(SLEEPER, start_new_session=True)  # leads a group of its own
    try:
        assert managed.proc is not None
        managed.proc.pid = stranger.pid  # the reaped leader's pid, given to the stranger
        managed.kill()
        assert not _wait_gone(stranger, 1.0), "kill() signalled the group of a pid that is no longer its"
    finally:
        stranger.kill()
        stranger.wait(10)


def test_kill_after_the_leader_was_reaped_still_kills_what_it_left_in_its_group(tmp_path: Path) -> None:
    """The leader starts a child in its group and exits; ``kill`` still ends the child."""
    pid_file = tmp_path / "child.pid"
    spawn = (
        "import subprocess, sys; "
        f"p = subprocess.Popen({SLEEPER!r}); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    managed = ManagedProcess([sys.executable, "-c", spawn], log_path=tmp_path / "leader.log", name="leader")
    managed.start()
    managed.wait(30)  # reaped; the child lives on in the group
    child = int(pid_file.read_text())
    managed.kill()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and _state(child) != "Z":
        assert time.monotonic() < deadline, "the leader's child outlived kill()"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"
