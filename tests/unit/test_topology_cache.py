"""``load_topology`` caches the validated topology by path, modification time and content hash."""

from __future__ import annotations

import os

from airflow_kafka_retry.policy.topology.file import load_topology

YAML = "topic: {topic}\ngroup_id: svc\nattempts: 3\nbackoff: {{kind: custom, delays: [30s, 60s]}}\n"


def test_an_unchanged_file_is_not_parsed_again(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(YAML.format(topic="orders"))
    first = load_topology(path)
    assert load_topology(path) is first
    assert load_topology(str(path)) is first  # the same path, as a string


def test_a_changed_content_is_loaded_again_even_with_the_same_modification_time(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(YAML.format(topic="orders"))
    assert load_topology(path).topic == "orders"
    stat = os.stat(path)
    path.write_text(YAML.format(topic="payments"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a copy that kept the old time
    assert load_topology(path).topic == "payments"


def test_a_touched_file_is_validated_again(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(YAML.format(topic="orders"))
    first = load_topology(path)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    again = load_topology(path)
    assert again is not first
    assert again == first
