"""
The Kafka connection of each role of a topology's DAGs: ``build_retry_dags(conn_ids=...)``.

On a secured broker each use of Kafka gets its own principal with only what it needs (docs/security.md,
"Give each use its own principal"). In Airflow a principal is a connection, so the factory takes one
connection id per role, each defaulting to ``kafka_conn_id``:

- ``setup``: the ``ensure_topics`` task (creates the path's missing topics);
- ``tiers``: the tier tasks (``main``, ``retry_N``; with the Spark engine, the configuration given to
  spark-submit);
- ``dlt_watch``: the ``watch_dlt`` task (reads the DLTs, commits the watch group);
- ``watcher``: what watches the heads and the groups' committed offsets: the triggerer's event triggers
  and, in schedule mode, the ``wait_for_due`` sensor (its trigger runs in the triggerer too);
- ``replay``: the redrive DAG's tasks (the topology's ``redrive`` policies, ``factory/redrive_dag.py``): a
  DLT replay each round, so the replay role's principal (the replay DAG's is ``build_dlt_replay_dag``'s).

The gate of a topology DAG's tasks (``operators/lane_gate.py``) reads no Kafka, so it has no connection of
its own. The assets the watchers fire
stay keyed by ``kafka_conn_id`` (``factory/events.py``): giving the watcher a connection of its own
changes no asset, no saved wave. Nothing here reads a connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The roles ``build_retry_dags`` takes a connection for, in the order of docs/security.md's table.
ROLES = ("tiers", "watcher", "dlt_watch", "setup", "replay")
#: Roles of the provider that another setting takes: named when given to ``build_retry_dags``.
ELSEWHERE = {
    "view": "the Retry tiers view's: the api-server's [kafka_retry] kafka_conn_id setting",
}


@dataclass(frozen=True)
class RoleConnections:
    """The connection id of each role (:data:`ROLES`)."""

    tiers: str
    watcher: str
    dlt_watch: str
    setup: str
    replay: str


def role_connections(kafka_conn_id: Any, conn_ids: Mapping[str, Any] | None) -> RoleConnections:
    """
    Each role's connection: its entry of ``conn_ids``, else ``kafka_conn_id``.

    An unknown role, or an id that is not a non-empty string, is a ``ValueError`` naming it and the roles.
    """
    _check_id("kafka_conn_id", kafka_conn_id)
    given = {} if conn_ids is None else conn_ids
    if not isinstance(given, Mapping):
        raise ValueError(
            f"conn_ids must map a role ({', '.join(ROLES)}) to a connection id, got {type(given).__name__}"
        )
    for role, conn_id in given.items():
        if role in ELSEWHERE:
            raise ValueError(
                f"conn_ids[{role!r}]: build_retry_dags has no {role} role; that connection is "
                f"{ELSEWHERE[role]} (the roles here: {', '.join(ROLES)})"
            )
        if role not in ROLES:
            raise ValueError(f"conn_ids: unknown role {role!r}; the roles are {', '.join(ROLES)}")
        _check_id(f"conn_ids[{role!r}]", conn_id)
    return RoleConnections(**{role: given.get(role, kafka_conn_id) for role in ROLES})


def _check_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be an Airflow connection id (a non-empty string), got {value!r}")
