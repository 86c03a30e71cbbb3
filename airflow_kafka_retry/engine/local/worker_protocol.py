"""
What the local engine and its partition worker processes say to each other, and how.

Each worker process has two pipes of its own: *control* (engine to worker) and *results* (worker to
engine). A message is a tuple whose first item names it, sent as one frame: a 4-byte big-endian
length, then the pickled tuple. Both ends are this package, started by the same user; no frame
comes from anywhere else (the pipes are passed only to that one child).

Engine to worker: ``("setup", sys_path, pickled WorkerSetup)`` once (the worker takes the engine's
``sys.path`` before it unpickles the setup, whose Kafka configuration may name a callback module),
then ``("run", partition, cutoff_ms)`` for each partition it is to run (``cutoff_ms``: that pass's;
None or left out: the setup's), ``("stop", reason)`` to stop at the
next chunk boundary, ``("exit",)`` when there is nothing left. The control pipe closing without ``exit`` means
the engine is gone: the worker exits at once.

Worker to engine: ``("progress", partition, summary)`` after each committed chunk, ``("done",
partition, summary)`` (summaries as :meth:`PartitionSummary.to_dict`), ``("log", record_fields)``
for each log record, ``("setup_failed", message)`` when it cannot start, ``("exit", peak_rss_mb)``
when it is done.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.policy.topology import Tier, Topology

_LENGTH = struct.Struct(">I")

#: Exit status of a worker that found its engine gone (control pipe closed without ``exit``).
EXIT_ENGINE_GONE = 75
#: Seconds between two ``("alive",)`` messages of a worker process (the engine kills a silent one).
HEARTBEAT_S = 2.0


class PipeClosed(EOFError):
    """The other end closed the pipe."""


@dataclass(frozen=True)
class WorkerSetup:
    """
    Everything a worker needs to run partitions of one tier run (sent once, pickled).

    :param log_levels: logger name -> level the worker logs at (the engine's effective levels).
    """

    topology: Topology
    tier: Tier
    kafka_config: dict[str, Any]
    options: DrainOptions
    cutoff_ms: int
    log_levels: dict[str, int] = field(default_factory=dict)


def setup_message(setup: WorkerSetup, sys_path: list[str]) -> tuple[str, list[str], bytes]:
    """
    The first message to a worker: the engine's ``sys.path``, then the setup.

    Handlers import there as they do in the engine; the setup is pickled on its own, so that the worker
    unpickles it with that path.
    """
    return ("setup", list(sys_path), pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL))


def read_setup(message: tuple[Any, ...]) -> WorkerSetup:
    """The setup of a ``setup`` message, after taking its ``sys.path``."""
    kind = message[0]
    if kind != "setup" or len(message) != 3:
        raise ValueError(f"expected the run's setup first, got {kind!r}")
    sys.path[:] = [str(p) for p in message[1]] or sys.path
    setup = pickle.loads(message[2])
    if not isinstance(setup, WorkerSetup):
        raise ValueError(f"expected the run's setup, got a {type(setup).__name__}")
    return setup


def start_piped(module: str, *args: str) -> tuple[subprocess.Popen[bytes], FrameWriter, FrameReader]:
    """
    ``python -m module control_fd answers_fd *args`` with a pipe each way: the process, then its ends here.

    The child gets only its two pipe ends (``pass_fds``, every other descriptor closed) and no stdin;
    what it needs travels as frames, never on its command line or in its environment.
    """
    control_r, control_w = os.pipe()
    answers_r, answers_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module, str(control_r), str(answers_w), *args],
            stdin=subprocess.DEVNULL,
            pass_fds=(control_r, answers_w),
            close_fds=True,
        )
    except BaseException:
        os.close(control_w)
        os.close(answers_r)
        raise
    finally:
        os.close(control_r)
        os.close(answers_w)
    return process, FrameWriter(control_w), FrameReader(answers_r)


def encode(message: tuple[Any, ...]) -> bytes:
    """One frame: the length of the pickled message, then the message."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


class FrameWriter:
    """Sends messages on a pipe's write end; safe to share between threads."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        frame = memoryview(encode(message))
        with self._lock:
            while frame:
                written = os.write(self.fd, frame)
                frame = frame[written:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class FrameReader:
    """Receives messages from a pipe's read end (one reading thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def _exactly(self, size: int) -> bytes:
        parts: list[bytes] = []
        while size:
            part = os.read(self.fd, min(size, 1 << 20))
            if not part:
                raise PipeClosed(f"pipe {self.fd} closed")
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def recv(self) -> tuple[Any, ...]:
        (length,) = _LENGTH.unpack(self._exactly(_LENGTH.size))
        message = pickle.loads(self._exactly(length))
        if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
            raise ValueError(f"not a worker message: {type(message).__name__}")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
