"""
Process plumbing shared by the brokers the suite starts (Tansu, Apache Kafka).

Free loopback ports, process groups that die with the process that started them, and a registry stopped at
interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Protocol


class Stoppable(Protocol):
    """A process the registry stops at interpreter exit."""

    def stop(self) -> None: ...


_LIVE: set[Stoppable] = set()
_LIVE_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port nobody listens on right now (it can still be taken before it is bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to SIGKILL the child when the process that started it dies (even by SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # best effort; atexit + process groups still apply
        pass


def parent_death_hook() -> Callable[[], None] | None:
    """
    ``preexec_fn`` for ``Popen``: ``die_with_parent`` when started from the main thread, else ``None``.

    The kernel ties PR_SET_PDEATHSIG to the thread that forked, so from another thread the child would
    be killed when that thread ends.
    """
    return die_with_parent if threading.current_thread() is threading.main_thread() else None


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``pid`` (started with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def register(broker: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.add(broker)


def unregister(broker: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(broker)


def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for broker in live:
        broker.stop()


atexit.register(_stop_all)
