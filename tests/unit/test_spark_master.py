"""A ``spark://`` master that does not answer is named at once, before anything is submitted."""

from __future__ import annotations

import socket

import pytest

from airflow_kafka_retry.sandbox.processes import free_port
from airflow_kafka_retry.spark.master import (
    SparkMasterUnreachableError,
    check_master_answers,
    master_addresses,
)


@pytest.mark.parametrize(
    ("master", "addresses"),
    [
        ("spark://127.0.0.1:7078", [("127.0.0.1", 7078)]),
        ("spark://a:1,b:2", [("a", 1), ("b", 2)]),
        ("spark://host", [("host", 7077)]),
        ("spark://[::1]:7077/", [("::1", 7077)]),
        ("local[2]", []),
        ("yarn", []),
        ("k8s://https://k:6443", []),
    ],
)
def test_the_addresses_of_a_master_url(master, addresses):
    assert master_addresses(master) == addresses


def test_a_master_url_that_is_not_host_port_is_named():
    with pytest.raises(SparkMasterUnreachableError, match=r"spark://h:x.*'h:x' is not host:port"):
        master_addresses("spark://h:x")


def test_a_port_nobody_listens_on_fails_at_once_naming_the_master():
    master = f"spark://127.0.0.1:{free_port()}"
    with pytest.raises(SparkMasterUnreachableError, match=f"Spark master {master} does not answer"):
        check_master_answers(master, timeout_s=5)


def test_a_listening_master_or_one_listening_standby_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_master_answers(f"spark://127.0.0.1:{port}")
        check_master_answers(f"spark://127.0.0.1:{free_port()},127.0.0.1:{port}")
    check_master_answers("local[2]")  # not checked: nothing to connect to
