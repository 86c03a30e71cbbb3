"""Run ``airflow-kafka-retry`` and SIGKILL the process at an exact point of the routing protocol.

    python -m tests.support.kill_at drain --topology ... (the CLI's own arguments)

``$AKR_KILL_AT`` names the point, ``$AKR_KILL_ON`` (default 2) which occurrence of it:

* ``routed``: the chunk's routed records have reached the broker (flushed) but its source offsets
  are not committed -- inside the open transaction, or between delivery and commit without one;
* ``committed``: right after a chunk's routed records and offsets were committed.

Before dying the process appends ``<point> <topic>[<partition>] committed-before=<offset>`` to
``$AKR_KILL_LOG``, so a test can check the kill landed where it should.
"""

from __future__ import annotations

import os
import signal
import sys

from airflow_kafka_retry import cli
from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction

_seen = {"routed": 0, "committed": 0}


def _maybe_die(point: str, source) -> None:
    if os.environ.get("AKR_KILL_AT") != point:
        return
    _seen[point] += 1
    if _seen[point] != int(os.environ.get("AKR_KILL_ON", "2")):
        return
    with open(os.environ["AKR_KILL_LOG"], "a", encoding="utf-8") as fh:
        fh.write(f"{point} {source.topic}[{source.partition}] up-to={source.offset}\n")
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    original_produce, original_commit = ChunkTransaction._produce, ChunkTransaction.commit
    current = {}

    def produce(self, routed, failures):
        original_produce(self, routed, failures)
        assert self.producer.flush(30) == 0, "routed records not delivered before the kill point"
        _maybe_die("routed", current["source"])

    def commit(self, source, routed, bookkeeping=None):
        # a keeper commits its main and hold partitions together: the first names the step
        current["source"] = source[0] if isinstance(source, list | tuple) else source
        original_commit(self, source, routed, bookkeeping)
        _maybe_die("committed", current["source"])

    ChunkTransaction._produce, ChunkTransaction.commit = produce, commit
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
