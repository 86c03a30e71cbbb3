"""Which of a replay's ACLs a failure is explained by: the principal, the operation and the resource."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.client_names import REPLAY_LOG_SUFFIX

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.acl import AclBinding
    from airflow_kafka_retry.policy.topology.model import Topology


def _a_target(binding: AclBinding) -> bool:
    """A replay target's binding (not another source's replay log)."""
    return (
        binding.resource_type == "topic"
        and binding.operation == "WRITE"
        and not binding.name.endswith(REPLAY_LOG_SUFFIX)
    )


def lacking_acls(
    error: BaseException,
    topology: Topology,
    kafka_config: Mapping[str, Any],
    *,
    ours: Collection[str],
    allowed_targets: Collection[str],
    transactional_id_prefix: str,
) -> str | None:
    """
    What ACL of the replay role the failure says is missing (``engine/kafka/authorization.py``); None: none.

    :param ours: the replay's source, its log and its transactional id.
    """
    from airflow_kafka_retry.engine.kafka.authorization import explain
    from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings

    if "lacks " in str(error):
        return None  # named already
    scope = AclScope(replay_targets=tuple(allowed_targets), transactional_id_prefix=transactional_id_prefix)
    needed = [
        b
        for b in acl_bindings(topology, scope, roles=["replay"])
        if b.name in ours or b.resource_type == "group" or _a_target(b)
    ]
    return explain(error, kafka_config, needed)
