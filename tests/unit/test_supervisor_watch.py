"""``operators/supervisor_watch.py`` on real processes: a task process whose parent dies is told so, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).parents[2]

#: The "task": watches its parent, and writes the stop reasons it was given to stdout before it exits.
TASK = """
import sys, time
from airflow_kafka_retry.operators.supervisor_watch import stop_when_supervisor_dies
reasons = []
with stop_when_supervisor_dies(reasons.append, interval_s=0.1) as supervisor:
    print("watching", supervisor, flush=True)
    deadline = time.monotonic() + 10  # never told: the task ends anyway, with no reason to print
    while not reasons and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # a second call would land here
print("stopped:", *reasons, sep="\\n", flush=True)
"""
#: The "supervisor": starts the task (its stdout is the test's pipe) and waits for it.
SUPERVISOR = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1]]).wait()"


def test_the_task_is_told_once_when_its_supervisor_dies_and_not_before() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, TASK], stdout=subprocess.PIPE, text=True, env=env
    )
    assert supervisor.stdout is not None
    try:
        assert supervisor.stdout.readline().split() == ["watching", str(supervisor.pid)]
        time.sleep(1.0)  # ten looks at a living supervisor
        assert supervisor.poll() is None, "the task stopped while its supervisor lived"
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(10)
        # the orphaned task still writes to the pipe: its reasons, then EOF when it exits
        out = supervisor.stdout.read()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert out.splitlines() == ["stopped:", f"the task's supervisor (pid {supervisor.pid}) is gone"], out
