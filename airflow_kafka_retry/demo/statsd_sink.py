"""
The demo's metrics backend: a StatsD socket on 127.0.0.1 that keeps this provider's lines in a file.

The demo's Airflow sends its metrics there with its own ``[metrics]`` settings (``statsd_on``,
InfluxDB-style tags), as it would to Telegraf or Prometheus' ``statsd_exporter``; the demo then
sums them up for the final table.
"""

from __future__ import annotations

import socket
import threading
from collections import defaultdict
from pathlib import Path
from types import TracebackType

#: Only this provider's metrics are kept (Airflow sends many of its own).
KEEP_PREFIX = "airflow.kafka_retry."


class StatsdSink:
    """
    A StatsD listener on loopback that appends the lines it keeps to a file.

    ``with StatsdSink(path) as sink:`` listens on ``127.0.0.1:sink.port`` and appends kept lines to ``path``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="demo-statsd-sink", daemon=True)

    def __enter__(self) -> StatsdSink:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()

    def _read(self) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            while not self._stop.is_set():
                try:
                    data = self._sock.recv(65536)
                except TimeoutError:
                    continue
                lines = data.decode("utf-8", "replace").splitlines()
                kept = [line for line in lines if line.startswith(KEEP_PREFIX)]
                if kept:
                    out.write("\n".join(kept) + "\n")
                    out.flush()


def counter_totals(path: Path) -> dict[str, dict[str, float]]:
    """Counters summed per metric (without prefix) and ``tier_topic`` tag: ``{name: {tier_topic: total}}``."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        head, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        if kind != "c":
            continue
        name, *tags = head.split(",")
        tier = dict(t.split("=", 1) for t in tags if "=" in t).get("tier_topic", "")
        totals[name[len(KEEP_PREFIX) :]][tier] += float(value)
    return {name: dict(by_tier) for name, by_tier in sorted(totals.items())}
