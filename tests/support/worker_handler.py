"""Ledger handlers for the local engine's worker processes.

:func:`pid_indexed` handles a batch as :func:`tests.support.ledger_handler.slow_indexed` does and
appends ``<partition> <pid>`` to the file named by ``AKR_PIDS``, so a test sees which process ran
which partition. :func:`dies_once` SIGKILLs its own process the first time it is handed the record at
``AKR_DIE_PARTITION``/``AKR_DIE_OFFSET`` (the file ``AKR_DIE_MARK`` remembers that it did), after
handling the batch's records before it: a worker dying mid-chunk. :func:`pid_noted` notes which
process handled each record. :func:`freezes_once` SIGSTOPs its own process instead: a wedged worker.
"""

from __future__ import annotations

import os
import signal

from tests.support import ledger_handler


def pid_indexed(records) -> None:
    with open(os.environ["AKR_PIDS"], "a", encoding="ascii") as fh:
        fh.write("".join(f"{p} {os.getpid()}\n" for p in sorted({r.partition for r in records})))
    ledger_handler.slow_indexed(records)


def _signals_itself_once(records, sig: signal.Signals) -> None:
    """Handle the records before the marked one, then send ``sig`` to this process (once); else handle all."""
    partition, offset = int(os.environ["AKR_DIE_PARTITION"]), int(os.environ["AKR_DIE_OFFSET"])
    mark = os.environ["AKR_DIE_MARK"]
    hit = [i for i, r in enumerate(records) if r.partition == partition and r.offset == offset]
    if hit and not os.path.exists(mark):
        open(mark, "w").close()
        ledger_handler.indexed(records[: hit[0]])
        os.kill(os.getpid(), sig)
    ledger_handler.indexed(records)


def dies_once(records) -> None:
    _signals_itself_once(records, signal.SIGKILL)


def freezes_once(records) -> None:
    """Like :func:`dies_once`, but the worker SIGSTOPs itself: alive, wedged, silent (no heartbeat)."""
    _signals_itself_once(records, signal.SIGSTOP)


def slow_noted(records) -> None:
    """:func:`tests.support.ledger_handler.slow_indexed`, noting ``<partition> <offset>`` of every record it
    is handed to the file named by ``AKR_HANDED`` first (several processes may share it)."""
    with open(os.environ["AKR_HANDED"], "a", encoding="ascii") as fh:
        fh.write("".join(f"{r.partition} {r.offset}\n" for r in records))
    ledger_handler.slow_indexed(records)


def pid_noted(records) -> None:
    """Succeeds; appends ``<partition> <offset> <pid>`` for each record to the file named by ``AKR_PIDS``."""
    with open(os.environ["AKR_PIDS"], "a", encoding="ascii") as fh:
        fh.write("".join(f"{r.partition} {r.offset} {os.getpid()}\n" for r in records))
