"""The Kafka launcher's jar cache (``sandbox/kafka_jars``) with concurrent resolves (issue 38 item 13).

Parallel test workers, a benchmark and the demo may resolve the same version at once. A complete cache is
never deleted (another process may be running a broker from it); a resolve that finds one already in
place when it finishes keeps that one and throws its own copy away.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_retry.sandbox import kafka_jars

if TYPE_CHECKING:
    import pytest


def _fake_maven(monkeypatch: pytest.MonkeyPatch, before_done=lambda: None) -> None:
    """``mvn dependency:copy-dependencies`` that writes one jar, after running ``before_done``."""

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        out = Path(next(arg for arg in cmd if arg.startswith("-DoutputDirectory=")).partition("=")[2])
        out.mkdir(parents=True)
        (out / "kafka_2.13-9.9.9.jar").write_text("ours")
        before_done()
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(kafka_jars, "find_mvn", lambda: "mvn")
    monkeypatch.setattr(kafka_jars.subprocess, "run", run)


def test_a_cache_another_process_completed_meanwhile_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(kafka_jars.CACHE_ENV, str(tmp_path / "cache"))
    target = kafka_jars.jars_dir("9.9.9")

    def another_process_finishes_first() -> None:
        target.mkdir(parents=True)
        (target / "kafka_2.13-9.9.9.jar").write_text("theirs, in use by a running broker")
        (target / ".complete").write_text("9.9.9\n")

    _fake_maven(monkeypatch, another_process_finishes_first)
    assert kafka_jars.ensure_kafka_jars("9.9.9") == target
    assert (target / "kafka_2.13-9.9.9.jar").read_text().startswith("theirs"), "a complete cache was replaced"
    assert (target / ".complete").exists()
    assert [p.name for p in target.parent.iterdir()] == ["lib"], "the resolve's own copy is left behind"


def test_an_incomplete_leftover_is_replaced_by_a_whole_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(kafka_jars.CACHE_ENV, str(tmp_path / "cache"))
    target = kafka_jars.jars_dir("9.9.9")
    target.mkdir(parents=True)
    (target / "half.jar").write_text("no marker: never handed out")
    _fake_maven(monkeypatch)
    assert kafka_jars.ensure_kafka_jars("9.9.9") == target
    assert sorted(p.name for p in target.iterdir()) == [".complete", "kafka_2.13-9.9.9.jar"]
    assert [p.name for p in target.parent.iterdir()] == ["lib"]
