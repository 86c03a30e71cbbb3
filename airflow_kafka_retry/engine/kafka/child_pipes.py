"""
Child processes spoken to over a pipe each way: starting one, framing messages, naming how it ended.

A message is a tuple whose first item names it, sent as one frame: a 4-byte big-endian length, then the
pickled tuple. Both ends are this package, started by the same user; no frame comes from anywhere else
(the pipes are passed only to that one child). The local engine's worker processes
(:mod:`~airflow_kafka_retry.engine.local.worker_protocol`) and the committed-offset reader
(:mod:`~airflow_kafka_retry.engine.heads.offset_reader`) speak this way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from typing import Any

_LENGTH = struct.Struct(">I")

#: Exit status of a child that found its parent gone (control pipe closed without ``exit``).
EXIT_ENGINE_GONE = 75


class PipeClosed(EOFError):
    """The other end closed the pipe."""


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


def describe_exit(returncode: int | None) -> str:
    """``killed by signal 9 (SIGKILL)`` / ``exited with status 3`` / ``is still running``."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


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
