"""``timed_handler``, slow on the retry tiers, each batch announced first: a test kills a worker mid-batch.

On a retry tier (attempt 2 and later), each call first appends a JSON line ``{"run", "host", "pid",
"topic", "ids", "started_ms", "slept"}`` to the file named by ``AKR_BATCH_LOG`` (``host``:
``AKR_HOSTNAME``, the worker the task runs on; ``pid``: this process), then sleeps ``AKR_BATCH_SLEEP_S``
seconds if the batch is a new one, then hands it to ``timed_handler.handle`` (which records each handling
in ``AKR_TIMED_LEDGER``). A process killed during the sleep has announced the batch and handled none of
it. New: its first record was in no earlier call of this process. ``timed_handler`` fails a batch at its
first record meant to fail, and the engine hands the rest back at once: that rest is not slept on again
(a sleep per split would make a batch cost a sleep per failing record). The main topic is handled at once.
"""

from __future__ import annotations

import json
import os
import time

from tests.support import timed_handler
from tests.support.timed_handler import record_notification

__all__ = ["handle", "record_notification"]


_seen: set[tuple[str, str]] = set()  # (topic, id) of the records this process was handed


def handle(records) -> None:
    records = list(records)
    if records and records[0].attempt >= 2:
        ids = [json.loads(r.value)["id"] for r in records]
        new = (records[0].topic, ids[0]) not in _seen
        _seen.update((records[0].topic, i) for i in ids)
        line = {
            "run": timed_handler._run(),
            "host": os.environ.get("AKR_HOSTNAME"),
            "pid": os.getpid(),
            "topic": records[0].topic,
            "ids": ids,
            "started_ms": int(time.time() * 1000),
            "slept": new,
        }
        fd = os.open(os.environ["AKR_BATCH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
        if new:
            time.sleep(float(os.environ.get("AKR_BATCH_SLEEP_S", "3")))
    timed_handler.handle(records)
