"""
Which topology a request names, if the user may see it: else the 404 of an unknown id.

A topology is shown only to users who may read every DAG that drains its tiers; a file that cannot be
read names no DAGs, so only users who may read all DAGs see it (:mod:`.access`). A hidden topology and
a missing one answer alike, so ids cannot be probed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import HTTPException

from airflow_kafka_retry.plugin import view_model
from airflow_kafka_retry.plugin.access import DagAccess

if TYPE_CHECKING:
    from airflow_kafka_retry.plugin.settings import ViewSettings


def replay_dag_id(topology: Any, settings: ViewSettings) -> str:
    """The topology's replay DAG (``build_dlt_replay_dag``), by ``[kafka_retry] replay_dag_id_template``."""
    return settings.replay_dag_id_template.format(topic=topology.topic)


def dag_ids(files: list[view_model.TopologyFile], settings: ViewSettings) -> list[str]:
    """Every DAG the files' topologies name (their tier DAGs and replay DAG), for one team lookup."""
    return [
        dag_id
        for f in files
        if f.topology is not None
        for dag_id in [*view_model.tier_dag_ids(f.topology, settings), replay_dag_id(f.topology, settings)]
    ]


def visible(access: DagAccess, file: view_model.TopologyFile, settings: ViewSettings) -> bool:
    """Whether the user may see ``file``: may read every tier DAG (all DAGs, for a broken file)."""
    if file.topology is None:  # names no DAG: its path and error only for who may read every DAG
        return access.may_read_every_dag()
    return access.may_read_all(view_model.tier_dag_ids(file.topology, settings))


def visible_topology(
    settings: ViewSettings, ident: str, user: Any
) -> tuple[view_model.TopologyFile, DagAccess]:
    """
    The topology file ``ident`` and the user's access, if the user may see it.

    :raises HTTPException: 404, alike for a missing and a hidden topology.
    """
    file = view_model.find_topology_file(settings, ident)
    unknown = HTTPException(404, f"no topology {ident!r} that you may read")
    if file is None:
        raise unknown
    access = DagAccess(user, dag_ids([file], settings))
    if not visible(access, file, settings):
        raise unknown
    return file, access
