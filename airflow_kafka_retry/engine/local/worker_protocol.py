"""
What the local engine and its partition worker processes say to each other, and how.

Each worker process has two pipes of its own: *control* (engine to worker) and *results* (worker to
engine), framed as :mod:`~airflow_kafka_retry.engine.kafka.child_pipes` frames them.

Engine to worker: ``("setup", sys_path, pickled WorkerSetup)`` once (the worker takes the engine's
``sys.path`` before it unpickles the setup, whose Kafka configuration may name a callback module),
then ``("run", partition, cutoff_ms)`` for each partition it is to run (``cutoff_ms``: that pass's;
None or left out: the setup's), ``("stop", reason)`` to stop at the
next chunk boundary, ``("exit",)`` when there is nothing left. The control pipe closing without ``exit`` means
the engine is gone: the worker exits at once.

Worker to engine: ``("progress", partition, summary)`` after each committed chunk, ``("done",
partition, summary)`` (summaries as :meth:`PartitionSummary.to_dict`), ``("log", record_fields)``
for each log record, ``("setup_failed", message)`` when it cannot start, ``("exit", peak_rss_mb)``
when it is done.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

#: Seconds between two ``("alive",)`` messages of a worker process (the engine kills a silent one).
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class WorkerSetup:
    """
    Everything a worker needs to run partitions of one tier run (sent once, pickled).

    :param log_levels: logger name -> level the worker logs at (the engine's effective levels).
    """

    topology: Topology
    tier: Tier
    kafka_config: dict[str, Any]
    options: DrainOptions
    cutoff_ms: int
    log_levels: dict[str, int] = field(default_factory=dict)


def setup_message(setup: WorkerSetup, sys_path: list[str]) -> tuple[str, list[str], bytes]:
    """
    The first message to a worker: the engine's ``sys.path``, then the setup.

    Handlers import there as they do in the engine; the setup is pickled on its own, so that the worker
    unpickles it with that path.
    """
    return ("setup", list(sys_path), pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL))


def read_setup(message: tuple[Any, ...]) -> WorkerSetup:
    """The setup of a ``setup`` message, after taking its ``sys.path``."""
    kind = message[0]
    if kind != "setup" or len(message) != 3:
        raise ValueError(f"expected the run's setup first, got {kind!r}")
    sys.path[:] = [str(p) for p in message[1]] or sys.path
    setup = pickle.loads(message[2])
    if not isinstance(setup, WorkerSetup):
        raise ValueError(f"expected the run's setup, got a {type(setup).__name__}")
    return setup
