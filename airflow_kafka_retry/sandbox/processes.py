"""
One lifecycle for every process the harnesses start (Tansu, Apache Kafka, PostgreSQL, Airflow, Spring, demo).

:class:`ManagedProcess` starts a command leading its own process group, stdout and stderr in a log file. On
Linux the kernel SIGKILLs it when the process that started it dies, even by SIGKILL (PR_SET_PDEATHSIG, set
only from the main thread: the kernel ties it to the thread that forked). :meth:`ManagedProcess.wait_ready`
waits, within a deadline, for a readiness check that establishes the process's own identity: a port that
answers is not enough, another process may hold it. :meth:`ManagedProcess.listens_on` checks that the
listening socket belongs to this process group; a launcher may check a cluster id or a secret instead. It
fails with the tail of the log when the process exits early or the deadline passes, and stops it.
:meth:`ManagedProcess.stop` sends the stop signal to the group, SIGKILL after a grace period; every live
process is also stopped at interpreter exit. Free loopback ports come from :func:`free_port`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, Self

_PR_SET_PDEATHSIG = 1


class Stoppable(Protocol):
    """A process (or an owner of processes) the registry stops at interpreter exit."""

    def stop(self) -> object: ...


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


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``pid`` (started with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def register(process: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.add(process)


def unregister(process: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(process)


def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for process in live:
        with contextlib.suppress(Exception):
            process.stop()


atexit.register(_stop_all)


def log_tail(path: Path | None, lines: int = 30) -> str:
    """The last ``lines`` lines of the file at ``path`` ("" when there is none)."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def child_setup(preexec: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """
    A child's ``preexec_fn``: ``preexec`` (a change of user, say), then PR_SET_PDEATHSIG from the main thread.

    The death signal is set last because a change of user clears it. libc is loaded here, before the fork
    (a child running as another user may not read this interpreter's files). A child whose parent is
    already gone when the signal is set exits at once. ``None`` when there is nothing to do.
    """
    libc = None
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(OSError):
            libc = ctypes.CDLL(None, use_errno=True)
    if preexec is None and libc is None:
        return None
    parent = os.getpid()

    def setup() -> None:  # pragma: no cover - runs in the forked child
        if preexec is not None:
            preexec()
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before the signal was set
                os._exit(1)

    return setup


class ProcessExited(RuntimeError):
    """The process ended while it was awaited; the message carries the tail of its log."""


class NotReady(RuntimeError):
    """The process did not pass its readiness check in time (it was stopped); with the tail of its log."""


class ManagedProcess:
    """
    One child process: own process group, dies with its parent, output in ``log_path``, always stopped.

    :param name: names it in errors (``"Tansu broker"``).
    :param stop_signal: what :meth:`stop` sends the group first (SIGTERM; SIGINT for a fast shutdown).
    :param grace: seconds :meth:`stop` waits after it before SIGKILL.
    :param preexec: runs in the child before PR_SET_PDEATHSIG is set (a change of user).
    :param append: append to ``log_path`` (a restart keeps the earlier output) rather than truncate it.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        log_path: Path,
        name: str,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
        grace: float = 20.0,
        preexec: Callable[[], None] | None = None,
        append: bool = True,
    ) -> None:
        self.cmd, self.log_path, self.name = list(cmd), Path(log_path), name
        self.env = dict(env) if env is not None else None
        self.cwd, self.stop_signal, self.grace = cwd, stop_signal, grace
        self._preexec, self._append = preexec, append
        self.proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ state
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log ("" when there is none)."""
        return log_tail(self.log_path, lines)

    def listens_on(self, port: int) -> bool:
        """Whether a process of this group holds the listening TCP socket of ``port`` (Linux ``/proc``)."""
        return self.proc is not None and group_listens_on(self.proc.pid, port)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab" if self._append else "wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=child_setup(self._preexec),  # noqa: PLW1509 - None when there is nothing to set
            )
        register(self)
        return self

    def wait_ready(
        self,
        ready: Callable[[], bool],
        *,
        timeout: float,
        what: str,
        during: str = "during start-up",
        interval: float = 0.1,
    ) -> float:
        """
        Poll ``ready()`` until it holds while the process still runs; the seconds it took.

        :param what: completes "{name} did not {what} within N s" (``"accept connections on 127.0.0.1:1"``).
        :param during: completes "{name} exited (code N) {during}" (``"during start-up on 127.0.0.1:9092"``).
        :raises ProcessExited: the process ended first.
        :raises NotReady: the deadline passed.

        On any failure (``ready`` raising included) the process is killed (with its group) before the error
        goes up: a process that did not start is of no use, and its log stays.
        """
        started = time.monotonic()
        deadline = started + timeout
        try:
            while True:
                self._raise_if_exited(during)
                if ready() and self.running:  # still ours: alive after it answered
                    return time.monotonic() - started
                if time.monotonic() >= deadline:
                    raise NotReady(
                        f"{self.name} did not {what} within {timeout:.0f}s; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(interval)
        except BaseException:
            self.kill()
            raise

    def check_alive(self, what: str = "") -> None:
        """Raise :class:`ProcessExited` (with the log's tail) when the process has ended."""
        self._raise_if_exited(what)

    def _raise_if_exited(self, what: str) -> None:
        code = self.returncode
        if self.proc is None or code is not None:
            where = f" {what}" if what else ""
            raise ProcessExited(
                f"{self.name} exited (code {code}){where}; log {self.log_path}:\n{self.log_tail()}"
            )

    def signal(self, sig: signal.Signals) -> None:
        """``sig`` to the process group; to the process itself when the group cannot be signalled."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                proc.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.proc.wait(timeout)

    def stop(
        self,
        grace: float | None = None,
        *,
        escalate: Callable[[], object] | None = None,
        resume: bool = False,
    ) -> bool:
        """
        The stop signal to the group, SIGKILL after ``grace`` (default the constructor's); idempotent.

        Whether it ended within the grace. ``escalate`` runs when the grace has passed, before SIGKILL (with
        10 s more to act); ``resume`` sends SIGCONT first, so a frozen process acts on the signal at once.
        """
        proc, clean = self.proc, True
        try:
            if proc is not None and proc.poll() is None:
                if resume:
                    self.signal(signal.SIGCONT)
                self.signal(self.stop_signal)
                try:
                    proc.wait(self.grace if grace is None else grace)
                except subprocess.TimeoutExpired:
                    clean = False
                    if escalate is not None:
                        with contextlib.suppress(Exception):
                            escalate()
                            proc.wait(10)
        finally:
            self.kill()
        return clean

    def kill(self) -> None:
        """
        SIGKILL the group (what the leader left behind too) and reap the leader; idempotent.

        Once the leader was reaped, its pid is free for the system to give another process, unless a process
        of its group still holds it as the group's id: the group is signalled only while no process has that
        pid (a live one means it was given again, and that group is not ours).
        """
        proc = self.proc
        try:
            if proc is not None:
                if proc.poll() is None:  # not reaped: its pid (its group's id) cannot have been given again
                    signal_group(proc.pid, signal.SIGKILL)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        proc.kill()
                    proc.wait(10)
                elif not _pid_alive(proc.pid):
                    signal_group(proc.pid, signal.SIGKILL)
        finally:
            unregister(self)

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, running={self.running})"


def stop_all(
    processes: Sequence[ManagedProcess], grace: float, *, resume: bool = False
) -> list[ManagedProcess]:
    """
    Each one's stop signal at once, SIGKILL to those still running after ``grace``; those, in a list.

    At once: processes that depend on each other (a cluster's nodes, Airflow's components) wind down
    together instead of waiting, one after another, for peers that are going away. A failure to stop one
    never keeps the others running. ``resume``: SIGCONT first, so a frozen process acts on the signal.
    """
    running = [process for process in processes if process.running]
    for process in running:
        if resume:
            process.signal(signal.SIGCONT)
        process.signal(process.stop_signal)
    deadline, unclean = time.monotonic() + grace, []
    for process in running:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            unclean.append(process)
        except Exception:  # killed below all the same
            continue
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    return unclean


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    return inodes


def _pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (a zombie included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[2]) == pgid:
                members.append(int(entry.name))
    return members


def group_listens_on(pgid: int, port: int) -> bool:
    """Whether a process of group ``pgid`` holds a listening TCP socket on ``port``."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return False
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) in wanted:
                        return True
    return False
