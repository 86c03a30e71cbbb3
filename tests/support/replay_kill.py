"""Run ``airflow-kafka-retry`` and SIGKILL the process at an exact point of a DLT replay.

    python -m tests.support.replay_kill dlt replay --topology ... (the CLI's own arguments)

``$AKR_KILL_AT`` names the point, ``$AKR_KILL_ON`` (default 10) when:

* ``produced``: right after the ``AKR_KILL_ON``-th replayed copy was produced and acknowledged
  (flushed) -- inside an open transaction whose log entries are not written yet;
* ``logged``: when the ``AKR_KILL_ON``-th chunk is about to commit: its copies and its replay-log
  entries were produced and acknowledged, the transaction is still open;
* ``committed``: right after the ``AKR_KILL_ON``-th chunk's transaction committed.
"""

from __future__ import annotations

import os
import signal
import sys

from confluent_kafka import Producer

from airflow_kafka_retry import cli
from airflow_kafka_retry.dlt import replay as replay_module
from airflow_kafka_retry.dlt.replay_moves import ReplayMoves

_seen = {"produced": 0, "logged": 0, "committed": 0}


def _maybe_die(point: str) -> None:
    if os.environ.get("AKR_KILL_AT") != point:
        return
    _seen[point] += 1
    if _seen[point] == int(os.environ.get("AKR_KILL_ON", "10")):
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    original_produce, original_commit = ReplayMoves._produce, ReplayMoves._commit_chunk

    def produce(self, producer, record, candidate, failures):
        move = original_produce(self, producer, record, candidate, failures)
        assert producer.flush(30) == 0, "copy not delivered before the kill point"
        assert not failures, "copy not delivered before the kill point"
        _maybe_die("produced")
        return move

    def commit_chunk(self, producer, chunk, summary):
        original_commit(self, producer, chunk, summary)
        _maybe_die("committed")

    class KillingProducer(Producer):
        def commit_transaction(self, *args):
            if self._in_chunk:
                assert self.flush(30) == 0, "log entries not delivered before the kill point"
                _maybe_die("logged")
            return super().commit_transaction(*args)

    def commit_chunk_logged(self, producer, chunk, summary):
        producer._in_chunk = True
        try:
            commit_chunk(self, producer, chunk, summary)
        finally:
            producer._in_chunk = False

    KillingProducer._in_chunk = False
    replay_module.Producer = KillingProducer
    ReplayMoves._produce, ReplayMoves._commit_chunk = produce, commit_chunk_logged
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
