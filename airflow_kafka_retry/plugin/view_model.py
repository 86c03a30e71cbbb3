"""
The JSON the "Retry tiers" page shows for one topology: tiers with backlog and runs, DLTs with counts.

The Kafka reads come from :mod:`~airflow_kafka_retry.plugin.scans` (deadlines, cache, cap); a slow or
unreachable broker shows as an error on its topic. Never payloads; never the Kafka config. A topology
file is shown by its name; its path (where the DAGs folder is) only to admins, as the patterns.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.plugin.dlt_page import dead_topic_kind
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.file import load_topology

if TYPE_CHECKING:
    from airflow_kafka_retry.plugin.scans import TopologyScan
    from airflow_kafka_retry.plugin.settings import ViewSettings
    from airflow_kafka_retry.policy.topology.model import Topology

#: ``(dag_id, limit, task_id)``: the DAG's last runs; with a task id, only the runs that task ran in.
RunsReader = Callable[[str, int, str | None], list[dict[str, Any]]]
#: A tier DAG's (``layout="tiers"``) one draining task.
REPROCESS_TASK_ID = "reprocess"


def topology_id(path: str) -> str:
    """A stable, URL-safe id of a topology file: its name and a short hash of its path."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{stem}-{hashlib.sha1(path.encode()).hexdigest()[:6]}"


@dataclass(frozen=True)
class TopologyFile:
    """A topology file the view reads, with its topology or the error that prevented loading it."""

    path: str
    topology: Topology | None = None
    error: str | None = None

    @property
    def id(self) -> str:
        return topology_id(self.path)

    def source(self, full_path: bool) -> str:
        """The file as the view shows it: its path when ``full_path`` (an admin), else its name."""
        return shown_source(self.path, full_path)

    def shown_error(self, full_path: bool) -> str | None:
        """Why it could not be read, naming the file as :meth:`source` does."""
        if self.error is None or full_path:
            return self.error
        return self.error.replace(self.path, self.source(False))

    def listing(self, full_path: bool = False) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self.id, "source": self.source(full_path)}
        if self.topology is not None:
            item["topic"] = self.topology.topic
        else:
            item["error"] = self.shown_error(full_path)
        return item


def shown_source(path: str, full_path: bool) -> str:
    """``path`` for an admin (``full_path``), else only the file's name."""
    return path if full_path else os.path.basename(path)


def read_topology_file(path: str) -> TopologyFile:
    try:
        return TopologyFile(path, topology=load_topology(path))
    except (TopologyError, OSError) as exc:
        return TopologyFile(path, error=str(exc))


def topology_files(settings: ViewSettings) -> list[TopologyFile]:
    return [read_topology_file(path) for path in settings.topology_files()]


def find_topology_file(settings: ViewSettings, ident: str) -> TopologyFile | None:
    path = next((p for p in settings.topology_files() if topology_id(p) == ident), None)
    return read_topology_file(path) if path is not None else None


def tier_dag_ids(topology: Topology, settings: ViewSettings) -> list[str]:
    """The DAG of each tier (one DAG for all, or one per tier): who may read them all may see the topology."""
    return [dag_id for dag_id, _ in tier_tasks(topology, settings)]


def tier_tasks(topology: Topology, settings: ViewSettings) -> list[tuple[str, str]]:
    """Each tier's DAG and the task that drains it, as ``build_retry_dags`` lays them out."""
    if settings.layout == "tiers":
        return [(settings.dag_id_template.format(topic=t.topic), REPROCESS_TASK_ID) for t in topology.tiers]
    from airflow_kafka_retry.factory.topology_dag import lane_id

    dag_id = settings.dag_id_template.format(topic=topology.topic)
    return [(dag_id, lane_id(t)) for t in topology.tiers]


def topology_view(
    path: str,
    topology: Topology,
    settings: ViewSettings,
    scan: TopologyScan,
    *,
    runs_reader: RunsReader,
    can_trigger: Callable[[str], bool],
    full_path: bool = False,
) -> dict[str, Any]:
    """
    The page's JSON from a read of the broker (``scan``, maybe cached) and this user's DAG access.

    ``full_path``: show the file's path (an admin), not only its name.
    """
    replay_dag = settings.replay_dag_id_template.format(topic=topology.topic)
    view_tiers = []
    one_dag = settings.layout != "tiers"
    for tier, (dag_id, task_id) in zip(topology.tiers, tier_tasks(topology, settings), strict=True):
        view_tiers.append(
            {
                "index": tier.index,
                "topic": tier.topic,
                "kind": tier.kind,
                "delay_ms": tier.delay_ms,
                "group": topology.consumer_group(tier),
                "dag_id": dag_id,
                "task_id": task_id,
                # a topology DAG run started by hand runs only the lanes its conf names
                "trigger_conf": {"lanes": [task_id]} if one_dag else {},
                "can_trigger": can_trigger(dag_id),
                "backlog": scan.backlog[tier.topic],
                "runs": runs_reader(dag_id, settings.runs, task_id if one_dag else None),
            }
        )
    may_replay = can_trigger(replay_dag)
    view_dlts = [
        {
            "topic": topic,
            # dlq: another framework's queue the topology names (dead_letter_queues), with its family
            "kind": dead_topic_kind(topology, topic),
            "family": topology.queue_family(topic),
            "replay_dag_id": replay_dag,
            "can_trigger": may_replay,
            "counts": counts,
        }
        for topic, counts in scan.dead.items()
    ]
    return {
        "id": topology_id(path),
        "source": shown_source(path, full_path),
        "topic": topology.topic,
        "group_id": topology.group_id,
        "now_ms": scan.now_ms,
        "tiers": view_tiers,
        "dead_letter_topics": view_dlts,
        # ordering: key: the blocked keys per partition (counts, the oldest block; never a key); else None
        "ordering": topology.ordering,
        "blocked_keys": scan.blocked,
    }
