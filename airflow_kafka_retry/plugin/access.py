"""
What one user may see and do in the view, asked of Airflow's own auth manager.

A topology is the sum of its tier DAGs: the view shows it (its file, topics, group, backlog, DLT
counts, broker errors) only to a user who may read every one of them. Each check passes the DAG's
team, as Airflow 3.3's own ``requires_access_dag`` does, so a multi-team auth manager decides as it
does for the DAG's own pages. A topology file that cannot be read names no DAGs: only a user who may
read all DAGs sees it. An auth manager that raises grants nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)


def _team_names(dag_ids: list[str]) -> Mapping[str, str | None]:
    from airflow.models.dag import DagModel

    return DagModel.get_dag_id_to_team_name_mapping(dag_ids) if dag_ids else {}


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


class DagAccess:
    """One user's permissions on a known set of DAGs (their teams are looked up once)."""

    def __init__(
        self,
        user: Any,
        dag_ids: Iterable[str],
        *,
        auth_manager: Any | None = None,
        team_names: Callable[[list[str]], Mapping[str, str | None]] | None = None,
    ) -> None:
        self._user = user
        self._manager = auth_manager if auth_manager is not None else _auth_manager()
        self._teams = (team_names or _team_names)(sorted(set(dag_ids)))

    def _details(self, dag_id: str) -> Any:
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

        return DagDetails(id=dag_id, team_name=self._teams.get(dag_id))

    def _ask(self, what: str, question: Callable[[], Any]) -> bool:
        try:
            return bool(question())
        except Exception:  # an auth manager that cannot answer grants nothing
            log.exception("authorization check failed for %s", what)
            return False

    def may_read_all(self, dag_ids: Iterable[str]) -> bool:
        """Whether the user may read every one of ``dag_ids`` (an empty set is not a permission)."""
        requests = [{"method": "GET", "details": self._details(dag_id)} for dag_id in dag_ids]
        return bool(requests) and self._ask(
            f"DAGs {[r['details'].id for r in requests]}",
            lambda: self._manager.batch_is_authorized_dag(requests, user=self._user),
        )

    def may_read_every_dag(self) -> bool:
        """Whether the user may read all DAGs (no DAG named), for what belongs to no known DAG."""
        return self._ask("all DAGs", lambda: self._manager.is_authorized_dag(method="GET", user=self._user))

    def may_administer(self) -> bool:
        """
        Whether the user may change Airflow's configuration (an admin).

        Only they see the view's settings, such as the topology patterns (the DAGs folder's path).
        """
        return self._ask(
            "configuration", lambda: self._manager.is_authorized_configuration(method="PUT", user=self._user)
        )

    def may(self, method: str, dag_id: str, entity: str | None = None) -> bool:
        """Whether the user may ``method`` the DAG itself or its ``entity`` ("RUN", "XCOM")."""
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity

        return self._ask(
            f"{method} {entity or 'DAG'} of {dag_id}",
            lambda: self._manager.is_authorized_dag(
                method=method,
                user=self._user,
                access_entity=DagAccessEntity[entity] if entity else None,
                details=self._details(dag_id),
            ),
        )
