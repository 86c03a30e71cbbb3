"""
Creating a topology's ACL bindings (:mod:`airflow_kafka_retry.policy.topology.acl`) with the admin client.

One ``create_acls`` call, each binding once (confluent-kafka refuses duplicates in one call), every
result awaited under one deadline. Creating a binding that exists already is not an error in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding as KafkaAclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from airflow_kafka_retry.engine.kafka.clients import admin_config

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.acl import AclBinding


class AclApplyError(RuntimeError):
    """Some bindings could not be created; the message names each one and Kafka's answer."""


def _kafka_binding(binding: AclBinding, principal: str) -> KafkaAclBinding:
    return KafkaAclBinding(
        ResourceType[binding.resource_type.upper()],
        binding.name,
        ResourcePatternType[binding.pattern.upper()],
        principal,
        "*",
        AclOperation[binding.operation],
        AclPermissionType.ALLOW,
    )


def apply_acls(
    bindings: Sequence[AclBinding],
    principals: Mapping[str, str],
    kafka_config: Mapping[str, Any],
    *,
    timeout: float = 30.0,
) -> int:
    """Create the bindings for their roles' principals; returns how many distinct bindings were sent."""
    unique: dict[KafkaAclBinding, AclBinding] = {}
    for binding in bindings:
        unique.setdefault(_kafka_binding(binding, principals[binding.role]), binding)
    if not unique:
        return 0
    admin = AdminClient(admin_config(kafka_config))
    give_up_at = time.monotonic() + timeout
    futures = admin.create_acls(list(unique), request_timeout=timeout)
    failures = []
    for kafka_binding, future in futures.items():
        ours = unique[kafka_binding]
        try:
            future.result(timeout=max(0.1, give_up_at - time.monotonic()))
        except KafkaException as exc:
            failures.append(f"{ours.operation} on {ours.resource()} for {kafka_binding.principal}: {exc}")
        except TimeoutError:
            failures.append(
                f"{ours.operation} on {ours.resource()} for {kafka_binding.principal}: no answer in "
                f"{timeout:g} s"
            )
    if failures:
        raise AclApplyError(
            f"{len(failures)} of {len(unique)} ACL binding(s) not created (is the admin configuration a "
            "super user, or allowed ALTER on the cluster?): " + "; ".join(failures)
        )
    return len(unique)
