"""The ledger handler, with a worker that fails an attempt on the cluster, retries, and then dies.

Imported by the engine in the process that runs the partition (an engine worker process): the import wraps
:meth:`~airflow_kafka_retry.engine.drain.transaction.ChunkTransaction.commit` once. With ``$AKR_RETRY_DIE``
set, partition 0's 2nd chunk commit raises a transient :class:`RouteError` before committing (attempt 1 fails
on "the cluster" after one committed chunk; the supervisor tries again), and its 4th chunk commit (attempt 2's
2nd chunk) SIGKILLs the process before committing.
"""

from __future__ import annotations

import os
import signal

from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction, RouteError

from tests.support.ledger_handler import decode, indexed

__all__ = ["decode", "indexed"]

_commits = [0]


def _install() -> None:
    if getattr(ChunkTransaction, "_retry_then_die", False):
        return
    original = ChunkTransaction.commit

    def commit(self, source, routed, bookkeeping=None):
        if os.environ.get("AKR_RETRY_DIE") and source.partition == 0:
            _commits[0] += 1
            if _commits[0] == 2:
                failed = RouteError("injected: the transaction coordinator did not answer")
                failed.transient = True
                raise failed
            if _commits[0] == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        return original(self, source, routed, bookkeeping)

    ChunkTransaction.commit = commit
    ChunkTransaction._retry_then_die = True


_install()
