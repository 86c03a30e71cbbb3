"""
Fixtures for the secured broker (issue 48): SASL_SSL SCRAM-SHA-512 over TLS, ACLs enforced.

* ``secure_kafka`` -- a :class:`~airflow_kafka_retry.sandbox.kafka_secure.SecureKafka` (session scope: one
  per xdist worker that runs such a test, about 6 s; the suite's plain broker is not touched).
* ``role_users`` -- fresh users, one per role of ``policy/topology/acl.py`` (``tiers-1a2b3c4d``...), for one
  test: ACLs granted in one test never help another (:class:`RoleUsers` makes fewer, for one role).
* ``grant`` -- create bindings for those users as the broker's admin (``engine/kafka/acl_admin.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.kafka.acl_admin import apply_acls
from airflow_kafka_retry.policy.topology.acl import ROLES, AclBinding
from airflow_kafka_retry.sandbox.kafka import QUICK_JIT
from airflow_kafka_retry.sandbox.kafka_secure import ADMIN, SecureKafka


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[SecureKafka]:
    with SecureKafka(jvm_options=QUICK_JIT) as kafka:
        yield kafka


class RoleUsers:
    """
    One user per role on ``kafka``: names, principals, client configurations and their files.

    ``roles``: the roles given fresh users (created in one admin request); with ``base``, every other role
    keeps ``base``'s user (a case that takes one binding from one role needs only that role's user fresh:
    the others always hold all their bindings).
    """

    def __init__(
        self, kafka: SecureKafka, roles: Sequence[str] = ROLES, *, base: RoleUsers | None = None
    ) -> None:
        self.kafka = kafka
        tag = uuid.uuid4().hex[:8]
        fresh = {role: f"{role}-{tag}" for role in roles}
        kafka.add_users(list(fresh.values()))
        self.names = {**(base.names if base is not None else {}), **fresh}
        self.principals = {role: f"User:{name}" for role, name in self.names.items()}

    def config(self, role: str) -> dict:
        return self.kafka.client_config(self.names[role])

    def file(self, role: str) -> Path:
        return self.kafka.config_file(self.names[role])

    @property
    def admin_file(self) -> Path:
        return self.kafka.config_file(ADMIN)

    @property
    def internal(self) -> str:
        """The node's own PLAINTEXT listener (a super user): for a test's checks and inputs, never a role."""
        return f"127.0.0.1:{self.kafka.port}"

    def principal_args(self) -> list[str]:
        return [arg for role in ROLES for arg in ("--principal", f"{role}={self.principals[role]}")]

    def grant(self, bindings: Sequence[AclBinding]) -> None:
        apply_acls(bindings, self.principals, self.kafka.client_config(ADMIN), timeout=30)


@pytest.fixture
def role_users(secure_kafka: SecureKafka) -> RoleUsers:
    return RoleUsers(secure_kafka)


@pytest.fixture
def grant(role_users: RoleUsers) -> Callable[[Sequence[AclBinding]], None]:
    return role_users.grant
