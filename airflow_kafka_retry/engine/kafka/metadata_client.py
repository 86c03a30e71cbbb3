"""
The process's admin client per Kafka configuration: topic metadata that never waits behind a fetch.

A watch consumer long-polls (``fetch.wait.max.ms``) while its partitions are at their end, and the broker
answers a connection's requests in order: a ``list_topics`` on that consumer waited for the fetch, about 0.9 s
with a 1 s wait. A triggerer's watches read their partition counts at every committed-offset check, in the
event loop's small default thread pool (6 threads on 2 cores), so 400 idle watches kept the pool full and
everything else waiting in it, Airflow's own "Trigger fired event" step included: at 100 topologies a due
wave's event reached the metadata DB 8 to 33 s late. An admin client fetches nothing, so its metadata answer
comes at once; one per process and configuration serves every watch. Never closed: it lives as long as the
process, and a forked child leaves its inherited copies alone (``process_clients.py``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_kafka_retry.engine.kafka.clients import admin_config
from airflow_kafka_retry.engine.kafka.process_clients import config_key, keep_inherited

_LOCK = threading.Lock()
_CLIENTS: dict[Hashable, AdminClient] = {}


def metadata_client(kafka_config: Mapping[str, Any]) -> AdminClient:
    """The admin client of this process for ``kafka_config`` (created at the first call)."""
    config = admin_config(kafka_config)
    key = config_key(config)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = AdminClient(config)
        return client


def _forget_in_child() -> None:
    """In a forked child: new clients at the next call; the inherited ones are never destroyed there."""
    for client in _CLIENTS.values():
        keep_inherited(client)
    _CLIENTS.clear()


os.register_at_fork(after_in_child=_forget_in_child)
