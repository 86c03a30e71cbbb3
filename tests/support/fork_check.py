"""Run a script that forks while it holds Kafka clients, and check that both its children exited cleanly."""

from __future__ import annotations

import subprocess
import sys


def assert_children_exit_cleanly(script: str, *args: str) -> None:
    """``python -c script *args`` must print ``preexec child: 0`` then ``forked child: 0`` and exit 0.

    (A destroyed copy of an inherited librdkafka client aborts the child: -6 or -11 instead of 0.)
    """
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["preexec child: 0", "forked child: 0"], done.stderr[-3000:]
