"""The Spring Boot order service of ``interop/spring-orders-service``: its two builds and one running JVM.

``spring_jar(flavour)`` builds ``boot4`` (Spring Boot 4.0.7, spring-kafka 4.0.x) or ``boot3`` (Boot 3.5.7,
spring-kafka 3.3.x) with ``mvn -q -B package -DskipTests`` unless the jar is newer than every source file;
a missing ``java`` or ``mvn`` fails (never skips). ``SpringService`` runs the jar as ``java -jar`` on a
broker, under ``processes.ManagedProcess``: its own process group, killed with the test process
(PR_SET_PDEATHSIG), stopped at the end or at interpreter exit.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

import pytest

from airflow_kafka_retry.sandbox.processes import ManagedProcess

APP_DIR = Path(__file__).parents[2] / "interop" / "spring-orders-service"
FLAVOURS = {"boot4": "Spring Boot 4.0.7, spring-kafka 4.0", "boot3": "Spring Boot 3.5.7, spring-kafka 3.3"}
ASSIGNED = re.compile(r"(\S+): partitions assigned: \[(.*)\]")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name!r} is not on PATH: the Spring interop tests need Java 17+ and Maven "
            "(Debian: apt-get install openjdk-17-jdk-headless maven)",
            pytrace=False,
        )
    return path


def spring_jar(flavour: str) -> Path:
    """The service's jar for ``flavour``, built now if a source is newer than it (under a file lock: parallel
    test workers build it once)."""
    jar = APP_DIR / "target" / flavour / f"spring-orders-service-{flavour}.jar"
    java, mvn = _tool("java"), _tool("mvn")
    sources = [APP_DIR / "pom.xml", *(p for p in (APP_DIR / "src").rglob("*") if p.is_file())]
    (APP_DIR / "target").mkdir(exist_ok=True)
    with (APP_DIR / "target" / f".build-{flavour}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists() and jar.stat().st_mtime > max(p.stat().st_mtime for p in sources):
            return jar
        env = {**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME") or str(Path(java).resolve().parents[1])}
        done = subprocess.run(
            [mvn, "-q", "-B", "package", "-DskipTests", "-P", flavour],
            cwd=APP_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    if done.returncode != 0 or not jar.exists():
        pytest.fail(f"mvn package -P {flavour} failed in {APP_DIR}:\n{(done.stdout + done.stderr)[-4000:]}")
    return jar


class SpringService:
    """One running order service; ``events()`` reads its JSON-lines books, ``log()`` its console output."""

    def __init__(self, jar: Path, workdir: Path, bootstrap: str, properties: Mapping[str, str]) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.events_file = workdir / "events.jsonl"
        self.log_file = workdir / "spring.log"
        args = {
            "spring.kafka.bootstrap-servers": bootstrap,
            "orders.events-file": str(self.events_file),
            "orders.payments.fixed-flag": str(workdir / "payments-fixed"),
            **properties,
        }
        self.service = ManagedProcess(
            [_tool("java"), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar", str(jar)]
            + [f"--{k}={v}" for k, v in args.items()],
            log_path=self.log_file,
            name="the Spring order service",
            cwd=workdir,
            grace=30,
            append=False,
        ).start()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def assigned(self) -> dict[str, set[str]]:
        """Group -> partitions Spring logged as assigned (the last assignment of each group)."""
        found: dict[str, set[str]] = {}
        for group, parts in ASSIGNED.findall(self.log()):
            found[group] = {p.strip() for p in parts.split(",") if p.strip()}
        return found

    def wait_assigned(self, groups: Iterable[str], timeout: float = 120.0) -> dict[str, set[str]]:
        """Wait until every group in ``groups`` has partitions assigned (read from Spring's log)."""
        wanted = set(groups)
        deadline = time.monotonic() + timeout
        while True:
            found = self.assigned()
            if wanted <= {g for g, parts in found.items() if parts}:
                return found
            if not self.service.running or time.monotonic() > deadline:
                raise AssertionError(
                    f"Spring assigned {sorted(found)} but not all of {sorted(wanted)}:\n{self.log()[-6000:]}"
                )
            time.sleep(0.5)

    def events(self, event: str | None = None) -> list[dict]:
        if not self.events_file.exists():
            return []
        lines = [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]
        return [e for e in lines if event is None or e["event"] == event]

    def wait_events(self, predicate, what: str, timeout: float = 90.0) -> list[dict]:
        """Wait until ``predicate(events())`` holds; returns the events."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            if predicate(events):
                return events
            if not self.service.running or time.monotonic() > deadline:
                raise AssertionError(f"Spring never got {what}; events: {events}\n{self.log()[-4000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        self.service.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
