"""Every process the Spark provider's hook starts gets the stripped environment: the real hook code, real
processes.

A Spark cluster cannot be started here, so the cluster's command-line tools are stand-ins on
``PATH`` (``spark-submit``, ``yarn``, a post-submit command) that record the environment they
were started with (``/proc/self/environ``) and answer as the real ones would; the REST form of
``--status``/``--kill`` runs the real ``/usr/bin/curl`` against a local HTTP endpoint that reads
curl's environment while it waits. The worker's environment holds a Kafka password in
``AIRFLOW_CONN_KAFKA_DEFAULT``; each case runs the provider's own ``SparkSubmitHook`` too, which
must leak it: that proves the check can fail.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_kafka_retry.hooks.spark_submit import IsolatedSparkSubmitHook

pytestmark = [pytest.mark.integration]

SECRET = f"s3cr3t-{uuid.uuid4().hex[:12]}"
DRIVER_ID = f"driver-20261123000000-{uuid.uuid4().hex[:4]}"
YARN_APP = "application_1700000000000_0042"
WITHHELD = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__")
HOOKS = [
    pytest.param(SparkSubmitHook, True, id="provider-hook-leaks"),
    pytest.param(IsolatedSparkSubmitHook, False, id="isolated-hook"),
]

RECORDER = """#!/bin/sh
# stand-in for a cluster tool: records how it was started, then answers like the real one
record="$AKR_RECORD_DIR/$(basename "$0").$$"
cat /proc/$$/environ > "$record.env"
printf '%s\\n' "$@" > "$record.args"
case " $* " in
  *" --status "*) printf '{\\n  "action" : "SubmissionStatusResponse",\\n  "driverState" : "FINISHED",\\n}\\n'
  ;; *" --kill "*|*" -kill "*|*post-submit*) ;;
  *) echo "INFO Client: Submitted application @APP@" ; exec sleep 60 ;;
esac
"""


@pytest.fixture
def worker(monkeypatch, tmp_path) -> Path:
    """A worker environment holding Airflow secrets, the stand-in tools first on PATH; returns the record
    folder."""
    record, bin_dir = tmp_path / "record", tmp_path / "bin"
    record.mkdir()
    bin_dir.mkdir()
    for name in ("spark-submit", "yarn", "akr-sidecar-stop"):
        tool = bin_dir / name
        tool.write_text(RECORDER.replace("@APP@", YARN_APP))
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AKR_RECORD_DIR", str(record))
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka-1:9092", "sasl.password": SECRET}}
        ),
    )
    monkeypatch.setenv("AIRFLOW_VAR_API_TOKEN", SECRET)
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", SECRET)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_STANDALONE",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": 7077,
                "extra": {"deploy-mode": "cluster"},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_YARN",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}),
    )
    return record


def _recorded(record: Path, tool: str) -> list[tuple[list[str], dict[str, str]]]:
    """(arguments, environment) of each run of ``tool``, in start order."""
    runs = sorted(record.glob(f"{tool}.*.env"), key=lambda p: p.stat().st_mtime_ns)
    result = []
    for env_file in runs:
        args = env_file.with_suffix(".args").read_text().splitlines()
        env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        result.append((args, env))
    return result


def _check_env(env: dict[str, str], leaks: bool) -> None:
    assert env["AKR_RECORD_DIR"], "the stand-in did not record the worker's ordinary environment"
    if leaks:
        assert SECRET in json.dumps(env), (
            "the control run did not see the worker's secrets: the check proves nothing"
        )
    else:
        assert SECRET not in json.dumps(env)
        assert not [k for k in env if k.startswith(WITHHELD)], sorted(env)


@pytest.mark.parametrize(("hook_class", "leaks"), HOOKS)
def test_spark_submit_status_and_kill_of_a_standalone_driver(worker, hook_class, leaks):
    hook = hook_class(conn_id="spark_standalone", status_poll_interval=0)
    hook._connection["rest_endpoint"] = None  # the spark-submit --status/--kill form, not the REST one
    hook._driver_id = DRIVER_ID

    hook._start_driver_status_tracking()
    hook.on_kill()

    assert hook._driver_status == "FINISHED"
    runs = _recorded(worker, "spark-submit")
    assert [args for args, _ in runs] == [
        ["--master", "spark://127.0.0.1:7077", "--status", DRIVER_ID],
        ["--master", "spark://127.0.0.1:7077", "--kill", DRIVER_ID],
    ]
    for _, env in runs:
        _check_env(env, leaks)


class _StatusEndpoint(BaseHTTPRequestHandler):
    """Spark's REST submission endpoint, enough for the hook.

    It reads the caller's environment before answering.
    """

    seen: list[tuple[str, dict[str, str]]] = []

    def _caller_env(self) -> dict[str, str]:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"curl" in cmdline and self.path.encode() in cmdline:
                    raw = Path(f"/proc/{pid}/environ").read_bytes()
                    return dict(i.split("=", 1) for i in raw.decode(errors="replace").split("\0") if "=" in i)
            except OSError:
                continue
        return {}

    def _answer(self) -> None:
        self.seen.append((f"{self.command} {self.path}", self._caller_env()))
        body = (
            b'{\n  "action" : "SubmissionStatusResponse",\n  "driverState" : "FINISHED",\n'
            b'  "success" : true\n}\n'
        )
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize(("hook_class", "leaks"), HOOKS)
def test_rest_status_and_kill_run_curl_without_the_workers_secrets(worker, hook_class, leaks):
    if not os.access("/usr/bin/curl", os.X_OK):
        pytest.skip("the provider runs /usr/bin/curl for Spark's REST endpoint; it is not installed here")
    _StatusEndpoint.seen = []
    server = HTTPServer(("127.0.0.1", 0), _StatusEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = hook_class(conn_id="spark_standalone", status_poll_interval=0)
        hook._connection["rest_endpoint"] = f"http://127.0.0.1:{server.server_port}"
        hook._driver_id = DRIVER_ID
        hook._start_driver_status_tracking()
        hook.on_kill()
    finally:
        server.shutdown()
        server.server_close()
    assert [request for request, _ in _StatusEndpoint.seen] == [
        f"GET /v1/submissions/status/{DRIVER_ID}",
        f"POST /v1/submissions/kill/{DRIVER_ID}",
    ]
    for _, env in _StatusEndpoint.seen:
        assert env, "the endpoint could not read curl's environment"
        _check_env(env, leaks)


@pytest.mark.parametrize(("hook_class", "leaks"), HOOKS)
def test_a_yarn_kill_while_spark_submit_runs_and_the_post_submit_commands(worker, hook_class, leaks):
    from airflow.providers.common.compat.sdk import AirflowException

    hook = hook_class(
        conn_id="spark_yarn",
        env_vars={"HADOOP_CONF_DIR": "/etc/hadoop/conf"},
        post_submit_commands=["akr-sidecar-stop post-submit"],
    )

    def kill_once_submitted() -> None:  # what Airflow does on SIGTERM while the task blocks in submit()
        deadline = time.monotonic() + 60
        while hook._yarn_application_id is None and time.monotonic() < deadline:
            time.sleep(0.05)
        hook.on_kill()

    killer = threading.Thread(target=kill_once_submitted)
    killer.start()
    with pytest.raises(AirflowException, match="Cannot execute"):
        hook.submit("app.py")
    killer.join(60)

    assert hook._yarn_application_id == YARN_APP
    [(submit_args, submit_env)] = _recorded(worker, "spark-submit")
    assert submit_args[:2] == ["--master", "yarn"]
    [(kill_args, kill_env)] = _recorded(worker, "yarn")
    assert kill_args == ["application", "-kill", YARN_APP]
    [(post_args, post_env)] = _recorded(worker, "akr-sidecar-stop")
    assert post_args == ["post-submit"]
    for env in (submit_env, kill_env, post_env):
        _check_env(env, leaks)
    assert submit_env["HADOOP_CONF_DIR"] == kill_env["HADOOP_CONF_DIR"] == "/etc/hadoop/conf"
