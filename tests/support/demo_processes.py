"""The processes of a demo the tests started: by its Airflow home, by a command-line fragment, by the port
they listen on (what must not outlive the demo)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def _pids_whose(proc_file: str, fragment: bytes, *, but_this_one: bool) -> list[int]:
    """Pids of live processes whose ``/proc/<pid>/<proc_file>`` holds ``fragment``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and not (but_this_one and int(entry.name) == os.getpid()):
            try:
                if fragment in (entry / proc_file).read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def processes_with(marker: bytes) -> list[int]:
    """Pids of live processes (not this one) whose environment names ``marker`` (the demo's Airflow home)."""
    return _pids_whose("environ", marker, but_this_one=True)


def processes_with_cmdline(fragment: bytes) -> list[int]:
    """Pids of live processes whose command line holds ``fragment``."""
    return _pids_whose("cmdline", fragment, but_this_one=False)


def listening(port: int) -> list[int]:
    """Pids of the processes listening on loopback ``port``."""
    return sorted(
        {
            c.pid
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
    )
