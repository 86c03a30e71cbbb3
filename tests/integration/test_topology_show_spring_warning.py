"""``topology show FILE --bootstrap``: a ``compat: none`` topology next to a Spring service's topics warns.

The topics are created by hand with Spring's names here; tests/interop checks the same against the topics a
running Spring service created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

pytestmark = [pytest.mark.integration]
REPO = Path(__file__).parents[2]


def show(path: Path, bootstrap: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "topology",
            "show",
            str(path),
            "--bootstrap",
            bootstrap,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_compat_none_warns_about_spring_named_topics(kafka_bootstrap, tmp_path):
    topic = unique_topic("orders")
    spring = [topic, f"{topic}-retry-1000", f"{topic}-retry-2000", f"{topic}-dlt"]
    data = {
        "topic": topic,
        "group_id": "orders-service",
        "attempts": 3,
        "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2.0, "max": "10s"},
    }
    none_file, preset_file = tmp_path / "none.yaml", tmp_path / "spring.yaml"
    none_file.write_text(yaml.safe_dump(data))
    preset_file.write_text(yaml.safe_dump({**data, "compat": "spring-3.2"}))
    create_topics(kafka_bootstrap, spring, 1)
    try:
        warned = show(none_file, kafka_bootstrap)
        assert warned.returncode == 0, warned.stderr
        found = json.loads(warned.stdout)["spring_named_topics"]
        # every Spring preset derives these delay-suffixed names for an exponential back-off
        assert found["spring-3.2"] == [f"{topic}-retry-1000", f"{topic}-retry-2000"], found
        assert f"warning: {none_file}: compat: none, but the broker has Spring-named topics" in warned.stderr
        assert "compat: spring-3.2" in warned.stderr
        quiet = show(preset_file, kafka_bootstrap)
        assert quiet.returncode == 0, quiet.stderr
        assert "warning" not in quiet.stderr, quiet.stderr
        assert json.loads(quiet.stdout)["spring_named_topics"] == {}
    finally:
        delete_topics(kafka_bootstrap, spring)
