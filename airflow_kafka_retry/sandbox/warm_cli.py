"""
``airflow`` commands run one after another in one long-lived Airflow process (tests and the fast demo).

Every ``airflow`` process pays for importing Airflow (about 3 s of CPU) and ``airflow dags test`` also
builds the in-process execution API (about 11 s more): about 14 s of CPU before the first task runs. In one
process that stays up, the second and later ``dags test`` of the same ``AIRFLOW_HOME`` take about 0.3 s
of CPU. :class:`WarmAirflowCli` keeps such a process per environment and runs each command there through
Airflow's own CLI parser, as ``airflow <args>`` would, with the command's stdout and stderr (the task
logs included) captured apart at the file-descriptor level.

Commands run one at a time, in order. A command that outlives its timeout kills the process (the next
command starts a new one) and raises :class:`subprocess.TimeoutExpired`, as :func:`subprocess.run` does.
Anything that must be signalled as its own process (the kill tests' ``dags test``) stays a plain
``airflow`` subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_SERVER = "airflow_kafka_retry.sandbox.warm_cli"


class WarmAirflowCli:
    """
    One Airflow process for ``env`` that runs ``airflow`` commands in turn (started on first use).

    :param env: the whole environment of the process (``AIRFLOW_HOME`` and the rest, as for ``airflow``).
    :param cwd: its working directory.
    """

    def __init__(self, *, env: Mapping[str, str], cwd: str | Path | None = None) -> None:
        self.env = dict(env)
        self.cwd = None if cwd is None else str(cwd)
        self._proc: subprocess.Popen[bytes] | None = None
        self._replies: int | None = None  # the read end of the pipe the process answers on
        self._lock = threading.Lock()

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """
        ``airflow *args`` in the warm process: its exit code, stdout and stderr.

        As :func:`subprocess.run` with ``capture_output=True, text=True`` gives them.
        """
        command = ["airflow", *args]
        with (
            self._lock,
            tempfile.NamedTemporaryFile("rb", prefix="airflow-out-") as out,
            tempfile.NamedTemporaryFile("rb", prefix="airflow-err-") as err,
        ):
            proc, replies = self._started()
            stdin = proc.stdin
            if stdin is None:  # pragma: no cover - Popen(stdin=PIPE) always has it
                raise RuntimeError("the warm Airflow process has no stdin")
            request = {"args": list(args), "stdout": out.name, "stderr": err.name}
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
            reply = _read_line(replies, timeout)
            stdout, stderr = (f.read().decode(errors="replace") for f in (out, err))
            if reply is None:
                self.close()
                raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
            if not reply:
                self.close()
                raise RuntimeError(
                    f"the warm Airflow process died running `{' '.join(command)}`:\n{stderr[-3000:]}"
                )
        return subprocess.CompletedProcess(command, json.loads(reply)["code"], stdout, stderr)

    def _started(self) -> tuple[subprocess.Popen[bytes], int]:
        if self._proc is not None and self._proc.poll() is None and self._replies is not None:
            return self._proc, self._replies
        read_end, write_end = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", _SERVER, str(write_end)],
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_end,),
            start_new_session=True,  # its task processes (worker pools, spark-submit) end with it
        )
        os.close(write_end)
        self._replies = read_end
        return self._proc, self._replies

    def close(self) -> None:
        """End the process and everything it started (its process group)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):  # between commands: nothing left to finish
                proc.wait(1)
            with contextlib.suppress(ProcessLookupError):  # what it started goes with it
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if self._replies is not None:
            os.close(self._replies)
            self._replies = None

    def __enter__(self) -> WarmAirflowCli:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_line(fd: int, timeout: float) -> str | None:
    """A line from the pipe ``fd`` ('' at its end), or None after ``timeout`` seconds (one line per reply)."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return ""
        data += chunk
    return data.decode()


def serve(replies_fd: int) -> int:
    """The warm process: a command per line on stdin, its exit code per line on ``replies_fd``."""
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()  # as airflow.__main__ does before a command
    parser = cli_parser.get_parser()
    replies = os.fdopen(replies_fd, "w")
    for line in sys.stdin:
        request: dict[str, Any] = json.loads(line)
        with open(request["stdout"], "wb") as out, open(request["stderr"], "wb") as err:
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                code = _run(parser, request["args"])
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        replies.write(json.dumps({"code": code}) + "\n")
        replies.flush()
    return 0


def _run(parser: Any, argv: list[str]) -> int:
    """``airflow *argv`` as ``airflow.__main__`` runs it; its exit code."""
    import traceback

    from airflow.cli.utils import redirect_stdout_log_handlers_to_stderr

    try:
        args = parser.parse_args(argv)
        if hasattr(args, "output"):  # as airflow.__main__: keep log lines out of structured output
            redirect_stdout_log_handlers_to_stderr()
        args.func(args)
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # the command failed: its traceback is its output, as in `airflow`
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
