"""Every topology a page shows (a YAML block with ``topic`` and ``group_id``) is one the provider accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.policy.topology.model import Topology

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)


def shown_topologies() -> list[tuple[str, int, dict]]:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            data = yaml.safe_load(match.group(1))
            if isinstance(data, dict) and "topic" in data and "group_id" in data:
                line = text.count("\n", 0, match.start()) + 1
                found.append((page.relative_to(REPO).as_posix(), line, data))
    return found


def test_the_pages_show_topologies() -> None:
    assert len(shown_topologies()) >= 8  # the check below reads them, not nothing


@pytest.mark.parametrize(("page", "line", "data"), shown_topologies(), ids=lambda v: str(v)[:40])
def test_a_topology_a_page_shows_is_accepted(page: str, line: int, data: dict) -> None:
    Topology.from_mapping(data, source=f"{page}:{line}")
