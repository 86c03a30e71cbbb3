"""Stop a drain at an exact point of the routing protocol until the test has hurt the cluster, in any process.

The cluster fault cases must kill a broker *between* two calls of a chunk's transaction, whether the
partition runs in a thread of the test, in an engine worker process or in a Spark executor. The engine
imports the run's handler in each of those processes; the handler module (``cluster_handler``) imports
this one, which wraps :class:`~airflow_kafka_retry.engine.drain.transaction.ChunkTransaction` once. The wrap
does nothing unless ``$AKR_POINT_DIR`` is set; then, at the ``$AKR_POINT_ON``-th chunk (default 2) of
partition ``$AKR_POINT_PARTITION`` (default 0), at point ``$AKR_POINT`` --

* ``produced``: the chunk's routed records were produced and acknowledged (flushed), inside the open
  transaction, before ``send_offsets_to_transaction`` and ``commit_transaction``;

-- it writes ``reached`` in that folder (the transactional id, the partition, the pid) and waits until the
test writes ``go`` (60 s at most, then it goes on and says so in ``late``). One rendezvous per folder: the
first process to create ``claimed`` takes it.
"""

from __future__ import annotations

import json
import os
import threading
import time

from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction

WAIT_S = 60.0
_local = threading.local()
_chunks: dict[tuple[str, int], int] = {}  # (folder, partition) -> chunks seen
_lock = threading.Lock()


def _due(partition: int) -> bool:
    folder = os.environ.get("AKR_POINT_DIR")
    if not folder or partition != int(os.environ.get("AKR_POINT_PARTITION", "0")):
        return False
    with _lock:
        seen = _chunks[(folder, partition)] = _chunks.get((folder, partition), 0) + 1
        if seen != int(os.environ.get("AKR_POINT_ON", "2")):
            return False
    try:
        os.close(os.open(os.path.join(folder, "claimed"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True


def _rendezvous(router: ChunkTransaction, partition: int) -> None:
    folder = os.environ["AKR_POINT_DIR"]
    facts = {"transactional_id": router.transactional_id, "partition": partition, "pid": os.getpid()}
    path = os.path.join(folder, "reached")
    with open(f"{path}.tmp", "w", encoding="utf-8") as fh:
        json.dump(facts, fh)
    os.replace(f"{path}.tmp", path)
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(os.path.join(folder, "go")):
        if time.monotonic() > deadline:
            with open(os.path.join(folder, "late"), "w", encoding="utf-8") as fh:
                fh.write("the test did not say go within 60 s\n")
            return
        time.sleep(0.02)


def _install() -> None:
    if getattr(ChunkTransaction, "_cluster_points", False):
        return
    original_commit, original_produce = ChunkTransaction.commit, ChunkTransaction._produce

    def commit(self, source, routed, bookkeeping=None):
        # a keeper commits its main and hold partitions together: the first names the step
        _local.partition = (source[0] if isinstance(source, list | tuple) else source).partition
        return original_commit(self, source, routed, bookkeeping)

    def produce(self, routed, failures):
        original_produce(self, routed, failures)
        partition = getattr(_local, "partition", None)
        if os.environ.get("AKR_POINT") == "produced" and partition is not None and _due(partition):
            assert self.producer.flush(30) == 0, "routed records not acknowledged before the fault"
            _rendezvous(self, partition)

    ChunkTransaction.commit, ChunkTransaction._produce = commit, produce
    ChunkTransaction._cluster_points = True


_install()
