"""Files that share an expensive session fixture run on one parallel worker, one after another.

A session-scoped fixture lives once per pytest-xdist worker: a standalone Spark cluster (three JVMs), the
secured broker, Kafka 4.4 with Kafka Connect, the 3-node Kafka cluster of the broker-loss tests. With
``--dist loadfile`` the files that use one land on whichever worker is free, and each worker that gets one
starts its own copy, then keeps it running until the session ends. On two cores that is CPU the tests need.

:class:`FixtureGroupScheduling` is ``loadfile`` with one change: the files that use one of
:data:`GROUPS`' fixtures (named in the file's text, directly or through a fixture that depends on it) form
one work unit, so one worker starts the fixture once and runs them all. A file that uses fixtures of two
groups goes with the first group listed. Every other file is its own unit, as before.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from xdist.scheduler import LoadFileScheduling

if TYPE_CHECKING:
    import pytest

#: (group, the fixtures whose use puts a file in it), in priority order
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spark-standalone", ("spark_cluster",)),
    ("secure-broker", ("secure_kafka", "role_users", "grant")),
    ("kafka-4.4", ("share_dlq_kafka", "connect_worker")),
    ("kafka-cluster", ("shared_kafka_cluster",)),
)


@cache
def group_of(path: Path) -> str | None:
    """The group of the test file at ``path``: the first of :data:`GROUPS` whose fixture it names."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for group, fixtures in GROUPS:
        if any(re.search(rf"(?<![\w.]){name}\b", text) for name in fixtures):  # not a module path
            return group
    return None


class FixtureGroupScheduling(LoadFileScheduling):
    """``--dist loadfile``, the files of one :data:`GROUPS` entry forming one work unit."""

    def __init__(self, config: pytest.Config, log=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        self._rootdir = Path(str(config.rootpath))

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        group = group_of(self._rootdir / path)
        return f"group:{group}" if group else path
