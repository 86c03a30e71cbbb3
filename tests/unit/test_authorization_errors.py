"""An ACL that is missing is not a passing cluster failure: it is reported at once, never tried again."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.engine.drain.supervisor import broker_transient
from airflow_kafka_retry.engine.kafka.clients import principal_of


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    ],
)
def test_an_authorization_failure_is_not_transient_even_when_the_transaction_is_abortable(code):
    # librdkafka marks a transaction that failed on a missing topic ACL abortable (txn_requires_abort)
    error = KafkaException(KafkaError(code, "Broker: authorization failed", txn_requires_abort=True))
    assert not broker_transient(error)
    wrapped = RuntimeError("commit failed")
    wrapped.__cause__ = error
    assert not broker_transient(wrapped)


def test_an_abortable_cluster_failure_stays_transient():
    error = KafkaException(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "too few", txn_requires_abort=True))
    assert broker_transient(error)


def test_the_principal_is_named_from_the_configuration_never_its_secret():
    assert principal_of({"sasl.username": "tiers", "sasl.password": "s3cret"}) == "User:tiers"
    assert principal_of({"bootstrap.servers": "k:9093"}) == "this connection's principal"
    assert principal_of(None) == "this connection's principal"


class _Described:
    def __init__(self, operations):
        self.authorized_operations = operations


class _Future:
    def __init__(self, result=None, error=None):
        self._result, self._error = result, error

    def result(self, timeout=None):
        if self._error is not None:
            raise self._error
        return self._result


def test_a_broker_that_reports_no_authorized_operations_is_not_taken_for_one_that_allows_none():
    # Tansu (the demo's broker) describes topics and groups without their authorized operations: the
    # DLT watch's check before its scan must then say nothing, not "lacks READ" (the demo's run of stop 54)
    from confluent_kafka.admin import AclOperation

    from airflow_kafka_retry.engine.kafka.authorization import _operations

    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: refused"))
    futures = {
        "unreported": _Future(_Described(None)),
        "empty": _Future(_Described([])),
        "read": _Future(_Described([AclOperation.READ, AclOperation.DESCRIBE])),
        "refused": _Future(error=refused),
    }
    assert _operations(futures, deadline=float("inf")) == {"read": {"READ", "DESCRIBE"}, "refused": set()}
