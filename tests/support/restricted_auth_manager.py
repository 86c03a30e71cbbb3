"""An auth manager for the view's API-server test: the simple auth manager, minus some DAGs for some users.

The simple auth manager's roles grant all DAGs or none; a real deployment's auth manager (FAB, Keycloak,
AWS) grants per DAG. ``KAFKA_RETRY_TEST_DENIED`` (JSON) names, per user, the DAGs they may not access at
all (``dags``) and those whose XComs they may not read (``xcom``); everything else is the simple
auth manager's answer. Configured with ``[core] auth_manager`` in the test's Airflow home.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


def _denied(user: Any, kind: str) -> set[str]:
    rules = json.loads(os.environ.get("KAFKA_RETRY_TEST_DENIED") or "{}")
    return set(rules.get(user.get_name(), {}).get(kind, ()))


class RestrictedAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if details is not None and details.id in _denied(user, "dags"):
            return False
        if (
            access_entity is DagAccessEntity.XCOM
            and details is not None
            and details.id in _denied(user, "xcom")
        ):
            return False
        if details is None and _denied(user, "dags"):
            return False  # who may not read some DAGs may not read "all DAGs"
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
