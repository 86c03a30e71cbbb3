"""``WarmAirflowCli`` (``sandbox/warm_cli.py``): ``airflow`` commands in one long-lived Airflow process.

It stands in for ``subprocess.run(["airflow", ...])`` in the tests and the fast demo, so it must give what
that gives: each command's own exit code, stdout and stderr, structured output (``-o json``) free of log
lines, a DAG run per ``dags test``, and a command that hangs must not hang the caller.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import airflow_env, seed_metadata_db
from airflow_kafka_retry.sandbox.warm_cli import WarmAirflowCli

pytestmark = [pytest.mark.integration]

DAG_FILE = """
import os, time
from airflow.sdk import DAG, task

with DAG("warm_plain", schedule=None):
    @task
    def hello():
        print("hello from pid", os.getpid())
        return 1
    hello()

with DAG("warm_sleeps", schedule=None):
    @task
    def sleeps():
        time.sleep(600)
    sleeps()
"""


def test_commands_run_in_one_process_with_their_own_exit_codes_and_output(tmp_path: Path) -> None:
    env = airflow_env(tmp_path / "airflow")
    (tmp_path / "airflow" / "dags" / "warm.py").write_text(textwrap.dedent(DAG_FILE))
    seed_metadata_db(env)
    with WarmAirflowCli(env=env) as cli:
        first, second = (cli.run("dags", "test", "warm_plain") for _ in range(2))
        pids = {
            line.split("hello from pid")[1].split()[0]
            for run in (first, second)
            for line in (run.stdout + run.stderr).splitlines()
            if "hello from pid" in line
        }
        # the in-process task ran in the warm process both times: one process, two DAG runs
        assert (first.returncode, second.returncode, len(pids)) == (0, 0, 1), (first.stdout + first.stderr)[
            -3000:
        ]
        listed = cli.run("dags", "list-runs", "warm_plain", "-o", "json")
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert [r["state"] for r in json.loads(listed.stdout)] == [
            "success",
            "success",
        ]  # only JSON on stdout

        missing = cli.run("dags", "test", "no_such_dag")
        assert missing.returncode == 1
        assert "Dag 'no_such_dag' could not be found" in missing.stderr
        assert "could not be found" not in cli.run("dags", "list", "-o", "json").stderr  # its own output

        with pytest.raises(subprocess.TimeoutExpired):
            cli.run("dags", "test", "warm_sleeps", timeout=15)
        # the hung process is gone with its command; the next command gets a new one
        assert cli.run("dags", "test", "warm_plain").returncode == 0
    with closing(sqlite3.connect(tmp_path / "airflow" / "airflow.db")) as con:
        runs = con.execute("SELECT dag_id, state FROM dag_run ORDER BY id").fetchall()
    assert runs[:2] == [("warm_plain", "success")] * 2
    assert runs[-1] == ("warm_plain", "success")
    assert ("warm_sleeps", "running") in runs  # killed mid-run, as a killed `airflow dags test` leaves it
