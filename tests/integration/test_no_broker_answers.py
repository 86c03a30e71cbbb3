"""Every broker of the bootstrap list down: the drain ends, naming the list, having done nothing."""

from __future__ import annotations

import time

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.processes import free_port

pytestmark = pytest.mark.integration


def test_all_brokers_down_fail_the_run_naming_the_bootstrap_list_within_the_timeout() -> None:
    topology = Topology.from_mapping(
        {"topic": "orders", "group_id": "svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "0ms"}},
        source="<all brokers down>",
    )
    bootstrap = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"  # nobody listens there
    options = DrainOptions(handler="tests.support.fault_handler:indexed", call_timeout_s=4.0)
    started = time.monotonic()
    with pytest.raises(KafkaConfigError) as raised:
        run_local(topology, topology.tier(0), {"bootstrap.servers": bootstrap}, options)
    took = time.monotonic() - started
    assert f"bootstrap.servers={bootstrap!r}" in str(raised.value)
    assert "nothing was read or committed" in str(raised.value)
    assert took < 60, f"the run took {took:.1f}s with a 4 s call timeout"  # liveness (it ends), not speed
