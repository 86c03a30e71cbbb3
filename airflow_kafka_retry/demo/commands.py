"""
The demo's ``airflow`` commands: each one logged to its own file, failures raised with their output.

Fast mode runs them one after another in one warm Airflow process (``sandbox/warm_cli.py``: Airflow starts
up once, not for every ``dags test``); full mode runs each as its own ``airflow`` process under
``sandbox/processes.ManagedProcess`` (its own process group, killed with the demo, stopped at interpreter
exit), so that stopping the demo ends whatever a command started.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from airflow_kafka_retry.sandbox.processes import ManagedProcess
from airflow_kafka_retry.sandbox.warm_cli import WarmAirflowCli


class DemoError(RuntimeError):
    """The demo could not finish; the message says where it stopped."""


class AirflowCommands:
    """
    ``airflow`` commands of one demo deployment.

    :param airflow: the ``airflow`` executable.
    :param env: the deployment's environment.
    :param home: its ``AIRFLOW_HOME``: each command's output goes to ``cli-NN.log`` there.
    :param warm: run them in one warm Airflow process (fast mode) rather than a process each.
    """

    def __init__(self, *, airflow: str, env: Mapping[str, str], home: Path, warm: bool) -> None:
        self.airflow = airflow
        self.env = dict(env)
        self.home = home
        self._warm = WarmAirflowCli(env=env, cwd=home) if warm else None
        self._children: list[ManagedProcess] = []
        self._count = 0

    def run(self, *args: str, timeout: float = 600) -> str:
        """``airflow *args``: its output, or a :class:`DemoError` with it if the command failed."""
        self._count += 1
        log = self.home / f"cli-{self._count:02d}.log"
        code: int | None
        if self._warm is not None:
            try:
                done = self._warm.run(*args, timeout=timeout)
                code, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as late:
                code, out = None, late.stdout  # str, though typed as bytes
                output = out.decode(errors="replace") if isinstance(out, bytes) else str(out or "")
            log.write_text(output)
        else:
            code = self._subprocess(args, log, timeout)
        if code != 0:
            raise DemoError(
                f"airflow {' '.join(args[:3])} failed ({'timed out' if code is None else f'exit {code}'}):\n"
                f"{log.read_text(errors='replace')[-3000:]}"
            )
        return log.read_text(errors="replace")

    def _subprocess(self, args: tuple[str, ...], log: Path, timeout: float) -> int | None:
        """``airflow *args`` in its own process group, output in ``log``: its exit code (None: timed out)."""
        process = ManagedProcess(
            [self.airflow, *args], log_path=log, name="airflow", env=self.env, cwd=self.home, append=False
        )
        self._children.append(process)
        process.start()
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            process.stop()

    def stop(self) -> None:
        """End the warm process and every command still running (the demo is stopping)."""
        if self._warm is not None:
            self._warm.close()
        for process in self._children:
            process.stop()
