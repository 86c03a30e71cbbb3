"""
Resolve Apache Kafka's broker jars from Maven Central into a cache outside git.

The version is pinned in this package's ``pom.xml``. ``ensure_kafka_jars()`` runs
``mvn dependency:copy-dependencies`` once into ``<cache>/kafka-<version>-<pom hash>/lib`` and writes a
marker when the copy is whole; later calls find the marker and run nothing. The directory name carries
a hash of the pom, so a changed pom (another dependency, say) never reuses an older copy. The cache is
``$AIRFLOW_KAFKA_RETRY_CACHE`` or ``~/.cache/airflow-kafka-retry``. ``ensure_jars`` does the same for any
other pom (the Kafka Connect worker's, ``testkit/kafka_connect``).

Every missing prerequisite is an error that names it and how to get it: no ``java`` or one older
than 17, no ``mvn``, or a Maven run that fails (Maven Central unreachable, say), with Maven's last
lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

CACHE_ENV = "AIRFLOW_KAFKA_RETRY_CACHE"
MIN_JAVA = 17
_MARKER = ".complete"


class KafkaJarsError(RuntimeError):
    """A prerequisite of the Apache Kafka broker is missing: Java 17+, Maven, or the jars themselves."""


def pom_path() -> Path:
    """The pom that pins the Kafka version (package data)."""
    return Path(str(resources.files(__package__).joinpath("pom.xml")))


def pinned_version() -> str:
    """The ``kafka.version`` property of the pom."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom_path().read_text())
    if match is None:
        raise KafkaJarsError(f"{pom_path()}: no <kafka.version> property")
    return match.group(1).strip()


def cache_root() -> Path:
    value = os.environ.get(CACHE_ENV, "").strip()
    return Path(value).expanduser() if value else Path.home() / ".cache" / "airflow-kafka-retry"


def java_major(java: str) -> int:
    """The major version of ``java`` (``java -version`` prints e.g. ``openjdk version "17.0.15"``)."""
    try:
        out = subprocess.run([java, "-version"], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KafkaJarsError(f"could not run {java!r} -version: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        raise KafkaJarsError(
            f"could not read the version of {java!r} from: {(out.stderr or out.stdout)[:300]!r}"
        )
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaJarsError(
            "the Apache Kafka broker needs Java 17 or newer, and no `java` was found "
            f"({'JAVA_HOME=' + home if home else 'not on PATH, JAVA_HOME unset'}). Install a JDK, e.g. "
            "`apt-get install openjdk-17-jre-headless`, or set JAVA_HOME."
        )
    major = java_major(java)
    if major < MIN_JAVA:
        raise KafkaJarsError(
            f"the Apache Kafka broker needs Java {MIN_JAVA} or newer; {java} is Java {major}. "
            "Install a newer JDK and put it on PATH or in JAVA_HOME."
        )
    return java


def find_mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError(
            "resolving Apache Kafka's jars needs Maven (`mvn`), which is not on PATH: install it, "
            "e.g. `apt-get install maven`."
        )
    return mvn


def _pom_for(version: str) -> str:
    return re.sub(
        r"<kafka\.version>[^<]+</kafka\.version>",
        f"<kafka.version>{version}</kafka.version>",
        pom_path().read_text(),
    )


def jars_dir(version: str | None = None) -> Path:
    """Where the jars of ``version`` (default the pinned one), resolved with this pom, are cached."""
    version = version or pinned_version()
    return cached_lib(_pom_for(version), f"kafka-{version}")


def cached_lib(pom: str, name: str) -> Path:
    """The cache directory of the jars ``pom`` resolves: ``<cache>/<name>-<hash of the pom>/lib``."""
    digest = hashlib.sha256(pom.encode()).hexdigest()[:10]
    return cache_root() / f"{name}-{digest}" / "lib"


def ensure_kafka_jars(version: str | None = None, *, timeout: float = 600.0) -> Path:
    """The directory holding every jar of the pinned (or given) Kafka version, resolved once."""
    version = version or pinned_version()
    return ensure_jars(
        _pom_for(version),
        f"kafka-{version}",
        what=f"org.apache.kafka:kafka_2.13:{version}",
        expect="kafka_2.13-*.jar",
        timeout=timeout,
    )


def ensure_jars(pom: str, name: str, *, what: str, expect: str, timeout: float = 600.0) -> Path:
    """
    The directory holding every jar ``pom`` depends on, resolved once (:func:`cached_lib`).

    :param what: names the artifacts in errors (``org.apache.kafka:kafka_2.13:4.1.2``).
    :param expect: a file name pattern that a whole copy holds (``kafka_2.13-*.jar``).

    The copy goes to a temporary sibling directory that is renamed into place only when Maven
    succeeded, so an interrupted run never leaves a half cache that looks whole; a complete cache is never
    deleted (another process may run a broker from it): see :func:`_install`.
    """
    target = cached_lib(pom, name)
    if (target / _MARKER).exists():
        return target
    mvn = find_mvn()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="resolve-", dir=target.parent))
    try:
        (work / "pom.xml").write_text(pom)
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(work / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={work / 'lib'}",
        ]
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd=work)
        except subprocess.TimeoutExpired as exc:
            raise KafkaJarsError(
                f"`mvn dependency:copy-dependencies` for {what} did not finish "
                f"within {timeout:.0f}s; is Maven Central reachable?"
            ) from exc
        if done.returncode != 0 or not any((work / "lib").glob(expect)):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise KafkaJarsError(
                f"Maven could not resolve {what} (exit {done.returncode}). "
                f"Is Maven Central reachable (proxy settings in ~/.m2/settings.xml)? Maven said:\n{tail}"
            )
        (work / "lib" / _MARKER).write_text(name + "\n")
        _install(work / "lib", target)
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install(copy: Path, target: Path) -> None:
    """
    Rename the whole ``copy`` into place as ``target``, atomically; never delete a complete cache.

    A complete ``target`` (its marker written) may be in use by a running broker of another process: when
    a concurrent resolve finished first, its copy stays and ours is dropped. Only an incomplete leftover
    (no marker: never handed out) is replaced, moved aside by a rename first so that no reader ever sees
    a half-deleted directory under the target's name.
    """
    for _ in range(5):
        try:
            copy.rename(target)  # fails when target exists and is not empty
            return
        except OSError:
            if (target / _MARKER).exists():  # a concurrent resolve finished first: keep it
                return
            if not target.exists():
                continue
        aside = Path(tempfile.mkdtemp(prefix="stale-", dir=target.parent))
        try:
            target.rename(aside / "lib")
        except OSError:
            pass  # another resolve moved or completed it meanwhile: look again
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    if not (target / _MARKER).exists():
        raise KafkaJarsError(f"could not put the resolved jars in place at {target}")
