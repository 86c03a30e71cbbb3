"""
The Kafka work behind a DLT's page: its records listed, a dry run, its replays' statuses, a stop request.

Each is the replay's own code (``dlt/``): the records are matched by the replay's filter, the dry run is
:class:`~airflow_kafka_retry.dlt.replay.Replay` with ``dry_run=True`` (it writes nothing, not even the
replay log), the statuses and the stop request are those of ``dlt replay-status`` and ``dlt replay-stop``.
The callers (``plugin/redrive_api.py``) run them under the view's cap of Kafka scans and a deadline
(:func:`~airflow_kafka_retry.plugin.scans.run_capped`); each broker call here has its own timeout too.
Never a key or a value leaves this module.
"""

from __future__ import annotations

import heapq
import socket
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay import Replay
from airflow_kafka_retry.dlt.replay_status import ReplayStatusView
from airflow_kafka_retry.engine.kafka.clients import open_consumer, partition_counts
from airflow_kafka_retry.engine.kafka.messages import partition_of
from airflow_kafka_retry.engine.kafka.scan import ReadTimeout, Scan
from airflow_kafka_retry.plugin.dlt_page import MOVES_SHOWN, dry_run_answer, record_row
from airflow_kafka_retry.policy.client_names import READER_GROUP_PREFIX

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.filters import ReplayFilter
    from airflow_kafka_retry.dlt.replay_request import ReplayRequest
    from airflow_kafka_retry.policy.topology.model import Topology

#: At most this many records read per partition for a listing (the dry run reads them all).
SCAN_LIMIT = 20_000
#: The newest matching records a listing describes.
SHOWN = 100


def list_records(
    kafka_config: Mapping[str, Any],
    topology: Topology,
    topic: str,
    selection: ReplayFilter,
    *,
    now_ms: int,
    timeout_s: float,
    scan_limit: int = SCAN_LIMIT,
    shown: int = SHOWN,
) -> dict[str, Any]:
    """
    The records of ``topic`` the replay's ``selection`` matches: counted, the newest ``shown`` described.

    Read without committing, from the filter's first offset (default: the beginning) to each partition's end,
    at most ``scan_limit`` records per partition and for ``timeout_s`` seconds in all; a read cut short says
    so in ``partial``. ``limit`` is not applied (the dry run applies it, oldest first).
    """
    assume = topology.queue_family(topic)
    scanned: Counter[int] = Counter()
    matched, partial = 0, None
    newest: list[tuple[tuple[int, int, int], DltRecord]] = []
    config = {**kafka_config, "socket.timeout.ms": int(timeout_s * 1000)}
    with open_consumer(config, f"{READER_GROUP_PREFIX}view-{uuid.uuid4().hex[:8]}") as consumer:
        count = partition_counts(consumer, [topic], timeout=timeout_s)[topic]
        selection.check_partitions(topic, count)
        start = selection.start_offset
        keys = {(topic, p): -1 if start is None else start for p in selection.chosen_partitions(count)}
        scan = Scan(consumer, keys, deadline=time.monotonic() + timeout_s, poll_s=0.2, skip_before_start=True)
        try:
            for message in scan.records():
                partition = partition_of(message)
                scanned[partition] += 1
                record = DltRecord.from_message(message, queue_family=assume)
                if selection.matches(record):
                    matched += 1
                    order = (record.timestamp_ms, record.partition, record.offset)
                    if len(newest) < shown:
                        heapq.heappush(newest, (order, record))
                    elif order > newest[0][0]:
                        heapq.heapreplace(newest, (order, record))
                last = selection.offsets[1] if selection.offsets else None
                if scanned[partition] >= scan_limit or (last is not None and record.offset >= last):
                    if scanned[partition] >= scan_limit:
                        partial = f"read the first {scan_limit} records of each partition"
                    scan.finish((topic, partition))
        except ReadTimeout:
            partial = f"not read to the end within {timeout_s:g}s"
        finally:
            scan.close()
    return {
        "now_ms": now_ms,
        "scanned": sum(scanned.values()),
        "matched": matched,
        "partial": partial,
        "records": [record_row(r, now_ms) for _, r in sorted(newest, key=lambda item: item[0], reverse=True)],
    }


def dry_run(
    kafka_config: Mapping[str, Any],
    topology: Topology,
    request: ReplayRequest,
    *,
    targets: list[str],
) -> dict[str, Any]:
    """
    What a replay of ``request`` would move, and where, as the replay DAG's run would (its ``targets``).

    No transform: the page redrives records as they are (a transform goes through the replay DAG's form).
    """
    replay = Replay(
        topology,
        kafka_config,
        request,
        dry_run=True,
        move_cap=MOVES_SHOWN,
        allowed_targets=[t for t in targets if t not in ("main", "first-tier")],
        broker_retry_s=0.0,
    )
    return dry_run_answer(replay.run())


def statuses(kafka_config: Mapping[str, Any], topology: Topology, topic: str) -> list[dict[str, Any]]:
    """Every replay of ``topic`` in its replay log (``dlt replay-status``), newest first."""
    found = ReplayStatusView(topology, kafka_config, topic).read()
    return sorted(found, key=lambda s: s.get("started_ms") or 0, reverse=True)


def stop(
    kafka_config: Mapping[str, Any], topology: Topology, topic: str, replay_id: str, *, user: str
) -> dict[str, Any]:
    """The stop request ``dlt replay-stop`` writes, naming the Airflow user; the replay's status."""
    who = {"user": user, "host": socket.gethostname(), "via": "the Retry tiers view"}
    view = ReplayStatusView(topology, kafka_config, topic)
    return view.stop(replay_id, reason="from the Retry tiers view", requested_by=who)
