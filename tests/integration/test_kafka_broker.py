"""The Apache Kafka launcher (``sandbox/kafka.py``): real JVM brokers, their lifecycle and their failures.

Each test here starts its own broker (a few seconds each) because it stops, kills or breaks it; the
rest of the suite shares one session broker.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox import kafka_jars
from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka, KafkaStartError
from airflow_kafka_retry.sandbox.kafka_jars import KafkaJarsError, ensure_kafka_jars, find_java, find_mvn
from airflow_kafka_retry.sandbox.processes import port_open
from airflow_kafka_retry.sandbox.scratch_topics import admin_client

from tests.support.broker_cli import broker_cli, cli_env, pid_alive, wait_gone

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_lifecycle_metadata_and_clean_stop() -> None:
    broker = ApacheKafka(jvm_options=QUICK_JIT)
    with broker:
        pid, port, data = broker.pid, broker.port, broker.log_path.parent  # type: ignore[union-attr]
        assert pid is not None
        assert port is not None
        assert broker.bootstrap == f"127.0.0.1:{port}"
        assert os.getpgid(pid) == pid, "the JVM must lead its own process group"
        md = admin_client(broker.bootstrap).list_topics(timeout=10)
        assert [b.id for b in md.brokers.values()] == [1]
        assert "Kafka Server started" in broker.log_path.read_text()  # type: ignore[union-attr]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"-Xmx768m" in cmdline
        assert cmdline.index(b"-XX:TieredStopAtLevel=1") < cmdline.index(b"kafka.Kafka"), "jvm_options"
        assert b"kafka.Kafka" in cmdline
    assert not broker.running
    assert wait_gone(pid)
    assert not port_open(port)
    assert not data.exists(), "the temporary data directory is removed on stop"
    broker.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not started"):
        broker.bootstrap


def test_port_in_use_reports_the_brokers_log() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = ApacheKafka(port=port)
        with pytest.raises(KafkaStartError, match="during start-up") as err:
            broker.start()
    assert re.search(r"(?i)address already in use", str(err.value)), str(err.value)
    assert not broker.running


def test_broker_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """SIGKILL of the starting process (a test process killed by CI, say) leaves no JVM behind."""
    code = (
        "from airflow_kafka_retry.sandbox.kafka import ApacheKafka; import time; "
        "k = ApacheKafka().start(); print(k.pid, flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert proc.stdout is not None
        jvm = int(proc.stdout.readline())
        assert pid_alive(jvm)
        proc.kill()
        proc.wait(10)
        assert wait_gone(jvm), f"Kafka JVM {jvm} outlived the process that started it"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_broker_cli_prints_bootstrap_and_stops_on_signal(sig: signal.Signals) -> None:
    with broker_cli() as (proc, first):
        assert proc.stderr is not None
        assert re.fullmatch(r"127\.0\.0\.1:\d+", first), first + proc.stderr.read()
        line = proc.stderr.readline()
        assert line.startswith("Apache Kafka pid "), line
        jvm = int(re.search(r"pid (\d+)", line).group(1))  # type: ignore[union-attr]
        assert admin_client(first).list_topics(timeout=10).brokers  # ready when the address is printed
        proc.send_signal(sig)
        assert proc.wait(60) == 0
        assert wait_gone(jvm), "broker outlived the CLI"
        assert not port_open(int(first.rsplit(":", 1)[1]))


# ----------------------------------------------------------------------------- missing prerequisites
def _fake_java(tmp_path: Path, version: str) -> Path:
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return home


def test_no_java_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    with pytest.raises(KafkaJarsError, match=r"needs Java 17 or newer, and no `java` was found.*JAVA_HOME="):
        find_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KafkaJarsError, match="not on PATH, JAVA_HOME unset"):
        find_java()


@pytest.mark.parametrize("version", ["11.0.2", "1.8.0_392"])
def test_old_java_is_refused_with_its_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, version)))
    major = version.split(".")[1] if version.startswith("1.") else version.split(".")[0]
    with pytest.raises(KafkaJarsError, match=rf"needs Java 17 or newer; .* is Java {major}\."):
        ApacheKafka().start()


def test_no_maven_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KafkaJarsError, match=r"needs Maven \(`mvn`\).*apt-get install maven"):
        find_mvn()
    monkeypatch.setenv(kafka_jars.CACHE_ENV, str(tmp_path / "empty-cache"))
    with pytest.raises(KafkaJarsError, match="needs Maven"):
        ensure_kafka_jars()


def test_unresolvable_version_carries_mavens_words(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What an unreachable Maven Central or an unknown version looks like.

    Maven's own lines, and no half-written cache.
    """
    monkeypatch.setenv(kafka_jars.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(
        KafkaJarsError, match=r"Maven could not resolve org.apache.kafka:kafka_2.13:0.0.0-none"
    ):
        ensure_kafka_jars("0.0.0-none", timeout=300)
    assert not kafka_jars.jars_dir("0.0.0-none").exists()
    assert list((tmp_path / "cache").glob("*/resolve-*")) == []


def test_second_resolution_runs_no_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lib = ensure_kafka_jars()
    assert any(lib.glob("kafka_2.13-*.jar"))
    assert (lib / ".complete").exists()
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn on PATH now: a cached resolve must not need it
    assert ensure_kafka_jars() == lib


def test_a_suite_whose_broker_cannot_start_fails_and_never_falls_back_to_tansu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The suite's own session broker (tests/conftest.py): an old Java ends the run as failed, naming it."""
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(
        test_needs_kafka="def test_needs_kafka(kafka_bootstrap):\n    print('BROKER', kafka_bootstrap)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("AIRFLOW_KAFKA_RETRY_TEST_BROKER", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "11.0.2")))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", timeout=120)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*could not start the Apache Kafka broker under test*Java 17 or newer*"])
    assert "BROKER" not in result.stdout.str()


# ------------------------------------------------------------------------ its own broker, or none (item 13)
def test_another_kafka_on_the_port_never_counts_as_ready() -> None:
    """Another Kafka answering on the port (another worker's, after a port race) is not this broker.

    It answers metadata under its own cluster id; only the id this broker's storage was formatted with counts.
    """
    with ApacheKafka(jvm_options=QUICK_JIT) as other:
        ours = ApacheKafka(port=other.port, jvm_options=QUICK_JIT, startup_timeout=60)
        with pytest.raises(KafkaStartError, match="cluster id") as err:
            ours.start()
        assert not ours.running, str(err.value)
        assert admin_client(other.bootstrap).list_topics(timeout=10).brokers, "the other broker is untouched"


def test_a_warm_up_failure_leaves_no_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kafka_retry.sandbox import kafka

    broker, pids = ApacheKafka(jvm_options=QUICK_JIT), []

    def broken_warm_up(bootstrap: str, timeout: float) -> None:
        pids.append(broker.pid)
        raise RuntimeError("the coordinators never loaded")

    monkeypatch.setattr(kafka, "warm_up", broken_warm_up)
    try:
        with pytest.raises(RuntimeError, match="never loaded"):
            broker.start()
        assert pids
        assert pids[0] is not None
        assert not broker.running
        assert wait_gone(pids[0]), f"the JVM {pids[0]} of a broker whose warm-up failed still runs"
    finally:
        broker.stop()
