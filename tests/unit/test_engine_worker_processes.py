"""Unit tests of the pure parts of the local engine's worker processes: framing, setup, failures, sizing."""

from __future__ import annotations

import os
import sys

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.kafka.child_pipes import (
    FrameReader,
    FrameWriter,
    PipeClosed,
    describe_exit,
    encode,
)
from airflow_kafka_retry.engine.local.engine import _shippable, default_parallelism, worker_processes
from airflow_kafka_retry.engine.local.worker_failure import worker_failure
from airflow_kafka_retry.engine.local.worker_pool import ProcessPool
from airflow_kafka_retry.engine.local.worker_protocol import WorkerSetup, read_setup, setup_message
from airflow_kafka_retry.policy.topology.model import Topology

TOPOLOGY = Topology.from_mapping(
    {"topic": "orders", "group_id": "orders-svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "1s"}},
    source="<unit>",
)


def _setup(**kafka: object) -> WorkerSetup:
    return WorkerSetup(
        TOPOLOGY,
        TOPOLOGY.tier(1),
        {"bootstrap.servers": "k:9092", **kafka},
        DrainOptions("app.handlers:handle"),
        1_000,
        log_levels={"": 20},
    )


def test_frames_round_trip_over_a_pipe_in_order():
    read_fd, write_fd = os.pipe()
    writer, reader = FrameWriter(write_fd), FrameReader(read_fd)
    big = ("progress", 3, {"payload-free": "x" * 200_000})  # larger than a pipe's buffer: read in parts
    try:
        import threading

        sender = threading.Thread(target=lambda: [writer.send(m) for m in (("run", 1), big, ("exit",))])
        sender.start()
        assert reader.recv() == ("run", 1)
        assert reader.recv() == big
        assert reader.recv() == ("exit",)
        sender.join()
        writer.close()
        with pytest.raises(PipeClosed):
            reader.recv()
    finally:
        writer.close()
        reader.close()


def test_a_frame_that_is_not_a_message_is_refused():
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, encode(("ok",))[:4] + encode(("ok",))[4:])
        assert FrameReader(read_fd).recv() == ("ok",)
        import pickle
        import struct

        data = pickle.dumps([1, 2])
        os.write(write_fd, struct.pack(">I", len(data)) + data)
        with pytest.raises(ValueError, match="not a worker message"):
            FrameReader(read_fd).recv()
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_setup_carries_the_engines_sys_path_before_it_is_unpickled(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    message = setup_message(_setup(), ["/dags", *sys.path])
    assert isinstance(message[2], bytes)
    setup = read_setup(message)
    assert sys.path[0] == "/dags"
    assert setup.tier.topic == "orders-retry-1"
    assert setup.options.handler == "app.handlers:handle"
    with pytest.raises(ValueError, match="expected the run's setup first"):
        read_setup(("run", 1))


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (-9, "was killed by signal 9 (SIGKILL)"),
        (3, "exited with status 3"),
        (None, "is still running"),
        (-15, "signal 15 (SIGTERM)"),
    ],
)
def test_describe_exit(code, text):
    assert text in describe_exit(code)


def test_a_dead_workers_partition_keeps_what_it_committed_and_says_where_the_next_run_resumes():
    progress = PartitionSummary(
        "orders-retry-1",
        4,
        "g",
        start_offset=100,
        committed_offset=250,
        drained=150,
        succeeded=149,
        transactions=3,
    ).to_dict()
    failed = worker_failure(
        "orders-retry-1", 4, "g", pid=4242, returncode=-9, progress=progress, setup_error=None, started=None
    )
    assert failed.status == "failed"
    assert failed.drained == 150
    assert failed.committed_offset == 250
    assert failed.error.startswith(
        "WorkerDiedError: the worker process 4242 running orders-retry-1[4] was killed by signal 9 (SIGKILL)"
    )
    assert "resumes the partition at its committed offset (250)" in failed.error


def test_a_worker_that_died_before_any_commit_resumes_at_the_start_offset_or_says_nothing():
    failed = worker_failure("t", 0, "g", pid=1, returncode=1, progress=None, setup_error=None, started=None)
    assert failed.drained == 0
    assert failed.committed_offset is None
    assert "exited with status 1" in failed.error
    assert failed.error.endswith("committed offset")
    setup = worker_failure(
        "t",
        0,
        "g",
        pid=1,
        returncode=1,
        progress=None,
        setup_error="ModuleNotFoundError: No module named 'creds'",
        started=None,
    )
    assert setup.error.startswith("WorkerSetupError:")
    assert "No module named 'creds'" in setup.error


@pytest.mark.parametrize(
    ("parallelism", "cores", "processes"), [(3, 2, 2), (2, 2, 2), (1, 2, 0), (5, 1, 0), (8, 8, 8), (3, 16, 3)]
)
def test_worker_processes_one_per_core_at_most_none_below_two(parallelism, cores, processes):
    assert worker_processes(parallelism, cores) == processes


def test_each_worker_runs_its_share_of_the_parallelism():
    pool = ProcessPool(_setup(), 3, 2)
    assert (pool.processes, pool.slots) == (2, 2)
    assert (ProcessPool(_setup(), 8, 8).slots, ProcessPool(_setup(), 2, 5).processes) == (1, 2)


def test_default_parallelism_is_unchanged():
    assert default_parallelism(8, cores=2) == 3
    assert default_parallelism(1, cores=2) == 1
    assert default_parallelism(64, cores=16) == 8


def test_a_configuration_that_cannot_reach_a_worker_is_named():
    assert _shippable(_setup()) is None
    reason = _shippable(_setup(error_cb=lambda err: None))
    assert reason is not None
    assert "error_cb" in reason
    assert "bootstrap" not in reason
