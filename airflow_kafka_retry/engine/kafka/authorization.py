"""
Which ACL a failed run lacked: its bindings (``policy/topology/acl.py``) checked against what Kafka allows.

Kafka's answer to a missing ACL names a kind of resource (``TOPIC_AUTHORIZATION_FAILED`` in a transaction
that wrote to three topics), or none at all (a consumer whose group it may not describe only times out
finding its coordinator). After a run fails, :func:`explain` asks the cluster, as the run's own principal,
which operations it may do on each topic and group the run needs (``DescribeTopics`` and
``DescribeGroups`` with their authorized operations) and names the bindings that are missing: the
principal, the operation and the resource. A transactional id cannot be asked about; it is named when
Kafka's answer was ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``.

:func:`explain` is only called once a run has failed, under its own deadline; it never raises (None:
nothing to add). :func:`require` asks the same before a run whose missing ACL Kafka would only answer with
a timeout, and raises :class:`~airflow_kafka_retry.engine.kafka.clients.NotAuthorized` naming it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from airflow_kafka_retry.engine.kafka.clients import (
    AUTHORIZATION_CODES,
    NotAuthorized,
    admin_config,
    principal_of,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.acl import AclBinding

log = logging.getLogger(__name__)

#: What Kafka counts as allowing an operation (``ALL``, and ``READ``/``WRITE`` implying ``DESCRIBE``).
_IMPLIED = {"DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"}, "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"}}


def authorization_codes(error: BaseException | None) -> set[str]:
    """The ``*_AUTHORIZATION_FAILED`` names in ``error``'s chain (and in its text, for wrapped errors)."""
    found: set[str] = set()
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
            if error.args[0].code() in AUTHORIZATION_CODES:
                found.add(error.args[0].name())
        text = str(error)
        found.update(name for name in _CODE_NAMES if name in text)
        found.update(name for said, name in _SAID.items() if said in text)
        error = error.__cause__ or error.__context__
    return found


_CODE_NAMES = tuple(KafkaError(code).name() for code in sorted(AUTHORIZATION_CODES))
#: How librdkafka words them in messages that lost the error itself (``Broker: Topic authorization failed``).
_SAID = {
    "Topic authorization failed": "TOPIC_AUTHORIZATION_FAILED",
    "Group authorization failed": "GROUP_AUTHORIZATION_FAILED",
    "Transactional Id authorization failed": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "Cluster authorization failed": "CLUSTER_AUTHORIZATION_FAILED",
    ": Authorization failed": "TOPIC_AUTHORIZATION_FAILED",  # CreateTopics' answer
}


def _allowed(operations: set[str], wanted: str) -> bool:
    return bool({"ALL", wanted, *_IMPLIED.get(wanted, ())} & operations)


def _operations(futures: Mapping[str, Any], deadline: float) -> dict[str, set[str]]:
    """
    Each resource's authorized operations; an authorization failure: none.

    Unknown ones are left out: a resource the broker did not describe in time, or described without its
    authorized operations (a described resource always allows at least DESCRIBE, so an empty answer is
    none given, not none allowed).
    """
    found: dict[str, set[str]] = {}
    for name, future in futures.items():
        try:
            described = future.result(timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() in AUTHORIZATION_CODES:
                found[name] = set()
            continue
        except Exception:
            continue
        if not described.authorized_operations:  # not reported (a broker without them, such as Tansu)
            continue
        found[name] = {op.name for op in described.authorized_operations}
    return found


def missing_bindings(
    kafka_config: Mapping[str, Any],
    needed: Sequence[AclBinding],
    *,
    codes: set[str] = frozenset(),  # type: ignore[assignment]
    timeout: float = 5.0,
) -> list[AclBinding]:
    """The bindings of ``needed`` the configuration's principal does not hold, as far as Kafka says."""
    deadline = time.monotonic() + timeout
    admin = AdminClient(admin_config(kafka_config))
    topics = sorted({b.name for b in needed if b.resource_type == "topic" and b.pattern == "literal"})
    groups = sorted({b.name for b in needed if b.resource_type == "group" and b.pattern == "literal"})
    allowed: dict[tuple[str, str], set[str]] = {}
    if topics:
        futures = admin.describe_topics(
            TopicCollection(topics), request_timeout=timeout, include_authorized_operations=True
        )
        allowed.update({("topic", n): ops for n, ops in _operations(futures, deadline).items()})
    if groups:
        futures = admin.describe_consumer_groups(
            groups, request_timeout=timeout, include_authorized_operations=True
        )
        allowed.update({("group", n): ops for n, ops in _operations(futures, deadline).items()})
    missing = [
        b
        for b in needed
        if (b.resource_type, b.name) in allowed
        and not _allowed(allowed[(b.resource_type, b.name)], b.operation)
    ]
    if "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in codes:  # transactional ids cannot be described
        missing += [b for b in needed if b.resource_type == "transactional_id"]
    if "GROUP_AUTHORIZATION_FAILED" in codes:  # nor can a group prefix
        missing += [b for b in needed if b.resource_type == "group" and b.pattern == "prefixed"]
    return missing


def explain(
    error: BaseException | None,
    kafka_config: Mapping[str, Any],
    needed: Sequence[AclBinding],
    *,
    timeout: float = 5.0,
) -> str | None:
    """
    ``<principal> lacks READ on group 'g'; ...`` when a missing ACL explains ``error``, else None.

    Asked when Kafka answered an authorization failure, or when reading committed offsets timed out (a
    consumer that may not describe its group only times out); never for other failures (a dead broker).
    """
    codes = authorization_codes(error)
    text = str(error)
    # a consumer that may not describe its group only times out asking for its committed offsets
    group_symptom = "committed offset" in text and ("_TIMED_OUT" in text or "Timed out" in text)
    if not codes and not group_symptom:
        return None
    try:
        missing = missing_bindings(kafka_config, needed, codes=codes, timeout=timeout)
    except Exception as exc:
        log.debug("could not check the principal's ACLs: %s", exc)
        return None
    if not missing:
        return None
    return _lacks(kafka_config, missing, codes)


def require(kafka_config: Mapping[str, Any], needed: Sequence[AclBinding], *, timeout: float = 10.0) -> None:
    """
    Raise :class:`NotAuthorized` naming the bindings of ``needed`` Kafka says the principal lacks.

    One cheap check before a run whose missing ACL Kafka would only answer with a timeout (a consumer that
    may not read its group waits for a coordinator it never finds). Bindings Kafka does not answer about
    within ``timeout`` (a slow cluster) are not counted as missing: the run itself then says what is wrong.
    """
    try:
        missing = missing_bindings(kafka_config, needed, timeout=timeout)
    except Exception as exc:
        log.debug("could not check the principal's ACLs: %s", exc)
        return
    if missing:
        raise NotAuthorized(_lacks(kafka_config, missing, set()), [b.resource() for b in missing])


def _lacks(kafka_config: Mapping[str, Any], missing: Sequence[AclBinding], codes: set[str]) -> str:
    lacks = "; ".join(f"{b.operation} on {b.resource()} ({b.why})" for b in missing)
    said = f" (Kafka: {', '.join(sorted(codes))})" if codes else ""
    return (
        f"{principal_of(kafka_config)} lacks {lacks}{said}: grant this use the ACLs "
        "`airflow-kafka-retry topology acls FILE` prints for its role"
    )
