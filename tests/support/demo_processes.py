"""The processes of a demo the tests started: by its Airflow home, by a command-line fragment, by the port
they listen on (what must not outlive the demo)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def processes_with(marker: bytes) -> list[int]:
    """Pids of live processes whose environment names ``marker`` (the demo's Airflow home)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def processes_with_cmdline(fragment: bytes) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if fragment in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def listening(port: int) -> list[int]:
    """Pids of the processes listening on loopback ``port``."""
    return sorted(
        {
            c.pid
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
    )
