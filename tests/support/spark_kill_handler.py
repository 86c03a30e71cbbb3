"""A ledger handler that crashes its Spark task once per partition, mid-partition.

``crash_once`` behaves like :func:`tests.support.ledger_handler.indexed`, except that the first
time it is handed a batch of ``$AKR_KILL_TOPIC`` starting at or after offset ``$AKR_KILL_AT_OFFSET``,
it records a marker file in ``$AKR_KILL_DIR`` (``<topic>.<partition>``, created exclusively) and
ends the Python worker process with ``os._exit`` -- as an OOM kill or a lost executor would. The
records handled before are in the ledger; the chunk being handled was not committed. Spark then
retries the task, whose attempt finds the marker and runs normally.
"""

from __future__ import annotations

import os

from tests.support import ledger_handler

KILL_EXIT_CODE = 17


def crash_once(records) -> None:
    kill_dir, topic = os.environ.get("AKR_KILL_DIR"), os.environ.get("AKR_KILL_TOPIC")
    if records and kill_dir and records[0].topic == topic:
        first = records[0]
        if first.offset >= int(os.environ.get("AKR_KILL_AT_OFFSET", "60")):
            marker = os.path.join(kill_dir, f"{first.topic}.{first.partition}")
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                pass  # this partition was killed once already: this is the retried attempt
            else:
                os.write(fd, f"pid {os.getpid()} killed at offset {first.offset}\n".encode())
                os.close(fd)
                os._exit(KILL_EXIT_CODE)
    ledger_handler.indexed(records)
