"""``timed_handler``, slow on the retry tiers, each batch announced first: a test kills a worker mid-batch.

On a retry tier (attempt 2 and later), each call first appends a JSON line ``{"run", "host", "pid",
"topic", "ids", "started_ms"}`` to the file named by ``AKR_BATCH_LOG`` (``host``: ``AKR_HOSTNAME``, the
worker the task runs on; ``pid``: this process), then sleeps ``AKR_BATCH_SLEEP_S`` seconds, then hands
the batch to ``timed_handler.handle`` (which records each handling in ``AKR_TIMED_LEDGER``). A process
killed during the sleep has announced the batch and handled none of it. The main topic is handled at
once.
"""

from __future__ import annotations

import json
import os
import time

from tests.support import timed_handler
from tests.support.timed_handler import record_notification

__all__ = ["handle", "record_notification"]


def handle(records) -> None:
    records = list(records)
    if records and records[0].attempt >= 2:
        line = {
            "run": timed_handler._run(),
            "host": os.environ.get("AKR_HOSTNAME"),
            "pid": os.getpid(),
            "topic": records[0].topic,
            "ids": [json.loads(r.value)["id"] for r in records],
            "started_ms": int(time.time() * 1000),
        }
        fd = os.open(os.environ["AKR_BATCH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
        time.sleep(float(os.environ.get("AKR_BATCH_SLEEP_S", "3")))
    timed_handler.handle(records)
