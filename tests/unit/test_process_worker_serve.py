"""A partition worker reports a partition whose run raised as failed, naming the error, and serves on."""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.drain import supervisor as supervised
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.local import worker as process_worker
from airflow_kafka_retry.engine.local.worker_protocol import WorkerSetup
from airflow_kafka_retry.policy.topology.model import Topology

if TYPE_CHECKING:
    import pytest


class Results:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        self.sent.append(message)


class Control:
    def __init__(self, partitions: list[int]) -> None:
        self.runs: queue.Queue[tuple[int, int | None] | None] = queue.Queue()
        for partition in partitions:
            self.runs.put((partition, None))
        self.runs.put(None)

    def should_stop(self) -> str | None:
        return None


def test_a_partition_run_that_raises_is_reported_failed_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topology = Topology.from_mapping(
        {"topic": "orders", "group_id": "svc", "attempts": 2, "backoff": {"kind": "fixed", "delay": "0ms"}},
        source="<worker>",
    )
    setup = WorkerSetup(
        topology, topology.tier(0), {"bootstrap.servers": "x:1"}, DrainOptions(handler="json:loads"), 0
    )

    def broken(*args: Any, **kwargs: Any) -> PartitionSummary:
        if args[2] == 1:
            raise ModuleNotFoundError("No module named 'airflow_kafka_retry.gone'")
        return PartitionSummary("orders", args[2], "svc")

    monkeypatch.setattr(supervised, "run_partition", broken)
    results = Results()
    process_worker.serve(setup, Control([0, 1, 2]), results, slots=1)  # type: ignore[arg-type]
    done = {m[1]: m[2] for m in results.sent if m[0] == "done"}
    assert sorted(done) == [0, 1, 2]  # the worker went on after partition 1
    assert done[1]["status"] == "failed"
    assert done[1]["error"] == "ModuleNotFoundError: No module named 'airflow_kafka_retry.gone'"
    assert done[0]["status"] == done[2]["status"] == "ok"
