"""The fault suite's handler, stopping mid-partition until the test kills the process that runs it.

``wait_to_be_killed`` is :func:`tests.support.fault_handler.indexed`, except that the first batch of
``$AKR_KILL_TOPIC`` partition ``$AKR_KILL_PARTITION`` starting at or after offset ``$AKR_KILL_AT_OFFSET``
writes ``$AKR_KILL_DIR/<topic>.<partition>`` (created exclusively, holding the Python worker's pid) and waits
there, handling nothing more, for the test to SIGKILL its Spark executor, worker or driver. The batches
before it are in the ledger; the chunk they belong to was not committed. A later attempt finds the marker
and runs normally. Waiting is bounded (``$AKR_KILL_WAIT_S``, 120 s): a kill that never comes fails the
batch rather than hanging the run.
"""

from __future__ import annotations

import os
import time

from tests.support import fault_handler


def wait_to_be_killed(records) -> None:
    topic, kill_dir = os.environ.get("AKR_KILL_TOPIC"), os.environ.get("AKR_KILL_DIR")
    first = records[0] if records else None
    if (
        first is not None
        and kill_dir
        and first.topic == topic
        and first.partition == int(os.environ.get("AKR_KILL_PARTITION", "0"))
        and first.offset >= int(os.environ.get("AKR_KILL_AT_OFFSET", "60"))
    ):
        marker = os.path.join(kill_dir, f"{first.topic}.{first.partition}")
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass  # killed once already: this is the retried attempt
        else:
            os.write(fd, f"{os.getpid()} {first.offset}\n".encode())
            os.close(fd)
            deadline = time.monotonic() + float(os.environ.get("AKR_KILL_WAIT_S", "120"))
            while time.monotonic() < deadline:
                time.sleep(0.1)
            raise RuntimeError(f"{marker}: nobody killed this process within the wait")
    fault_handler.indexed(records)
