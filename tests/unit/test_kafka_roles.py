"""
Kafka's coordinator hash (``sandbox/kafka_roles.py``) against values Java computes.

The expected values were printed by OpenJDK 17's ``String.hashCode()`` and Kafka 4.1.2's ``Utils.abs``.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.sandbox.kafka_roles import (
    _uvarint,
    coordinator_partition,
    java_string_hashcode,
    kafka_abs,
)

INT_MIN = -(2**31)


@pytest.mark.parametrize(
    ("value", "java"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),  # Java's famous collision
        ("hello world", 1794106052),
        ("polygenelubricants", INT_MIN),  # Integer.MIN_VALUE
        ("é", 233),  # one UTF-16 code unit, not two UTF-8 bytes
        ("\U0001f600", 1772899),  # a surrogate pair: two code units
        ("hellohello", -1538739392),  # overflows to a negative int
        ("warm-up-transactions-0123456789", 1430139027),  # wraps around many times
        ("txn-ü-日本", -1667021349),
    ],
)
def test_java_string_hashcode(value: str, java: int) -> None:
    assert java_string_hashcode(value) == java


def test_kafka_abs_is_math_abs_but_zero_for_int_min() -> None:
    """``Utils.abs``, not ``Utils.toPositive`` (``x & 0x7fffffff``): -1 gives 1, not 2**31 - 1."""
    assert kafka_abs(INT_MIN) == 0  # Math.abs would stay negative
    assert kafka_abs(-1) == 1
    assert kafka_abs(-5) == 5
    assert kafka_abs(-1538739392) == 1538739392
    assert kafka_abs(99162322) == 99162322


@pytest.mark.parametrize(
    ("key", "partitions", "java"),
    [  # Utils.abs(key.hashCode()) % partitions, printed with kafka-clients 4.1.2 on the classpath
        ("polygenelubricants", 50, 0),
        ("hello", 50, 22),
        ("", 5, 0),
        ("hellohello", 50, 42),
        ("txn-ü-日本", 50, 49),
        ("txn-ü-日本", 5, 4),
        # a group a 4.1.2 broker stored in __consumer_offsets-3 of 5 (toPositive would say 0)
        ("g-2dd83606-a090-41b5-bb09-bb4f5db72f29", 5, 3),
    ],
)
def test_coordinator_partition(key: str, partitions: int, java: int) -> None:
    assert coordinator_partition(key, partitions) == java


def test_coordinator_partition_needs_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        coordinator_partition("g", 0)


def test_uvarint() -> None:
    assert _uvarint(0) == b"\x00"
    assert _uvarint(2) == b"\x02"
    assert _uvarint(300) == b"\xac\x02"
