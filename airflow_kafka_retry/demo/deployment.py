"""
The demo's throw-away Airflow home: topology file, DAG file and the environment of every Airflow process.

The retry path is the factory's one topology DAG (``build_retry_dags``' default layout, event-driven,
with ``include_main=True``, so the main topic runs as tier 0 too): ``kafka_retry__<topic>``, whose tasks
``main``, ``retry_1``, ``retry_2`` (a task per tier), ``watch_dlt`` (new dead letters) and
``ensure_topics`` (the topology's topics) each run when the watcher's event names their lane and skip
otherwise (``operators/lane_gate.py``), with the DLT notifiers
(``DltLogNotifier`` and the demo's alert recorder); the replay DAG is ``build_dlt_replay_dag``'s.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_kafka_retry.demo.orders import DEMO_DIR_ENV, InvalidOrder
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import airflow_env, free_port

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

DELAYS = ("10s", "20s")
DAG_ID_TEMPLATE = "kafka_retry__{topic}"
HANDLER = "airflow_kafka_retry.demo.orders:handle_orders"
DESERIALIZER = "airflow_kafka_retry.demo.orders:decode_order"

DAG_FILE = '''
"""The demo's DAGs (written by ``airflow-kafka-retry demo``): the topology's (a task per tier), the replay."""
from airflow_kafka_retry import build_dlt_replay_dag, build_retry_dags
from airflow_kafka_retry.demo.orders import record_alert
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier

TOPOLOGY = {topology!r}

globals().update(build_retry_dags(
    TOPOLOGY,
    handler={handler!r},
    value_deserializer={deserializer!r},
    include_main=True,
    on_dlt=[DltLogNotifier(), record_alert],
    options={{"batch_size": 25}},
    asset_server={asset_server!r},
    default_args={{"retries": 0}},
    tags=["demo"],
))
replay = build_dlt_replay_dag(TOPOLOGY, tags=["demo"])
'''


def topology_mapping(topic: str) -> dict[str, Any]:
    """The demo topology: two short tiers, invalid orders to their own DLT."""
    invalid = f"{InvalidOrder.__module__}.{InvalidOrder.__qualname__}"
    return {
        "topic": topic,
        "group_id": f"{topic}-service",
        "attempts": len(DELAYS) + 1,
        "backoff": {"kind": "custom", "delays": list(DELAYS)},
        "not_retryable": [invalid],
        "dlt_routing": {"-validation-dlt": [invalid]},
    }


@dataclass(frozen=True)
class Deployment:
    """Where everything of one demo run lives."""

    root: Path  # the run directory: Airflow home, the service's books, the picture
    topology: Topology
    env: dict[str, str]

    @property
    def home(self) -> Path:
        return self.root / "airflow"

    @property
    def database_url(self) -> str:
        """The metadata DB's SQLAlchemy URL: a SQLite file in the home, or PostgreSQL (``--postgres``)."""
        return self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]

    @property
    def database_name(self) -> str:
        return "PostgreSQL" if self.database_url.startswith("postgresql") else "SQLite"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}"

    @property
    def dag_id(self) -> str:
        """The topology's one DAG: a task per tier, the DLT watch and the setup."""
        return DAG_ID_TEMPLATE.format(topic=self.topology.topic)

    def task_id(self, tier: Tier) -> str:
        """The task of the topology DAG that drains ``tier``: ``main`` (tier 0), ``retry_<n>``."""
        from airflow_kafka_retry.factory.topology_dag import lane_id  # imports Airflow: only when asked

        return lane_id(tier)

    @property
    def setup_task(self) -> str:
        """The topology DAG's task that creates the retry path's topics."""
        from airflow_kafka_retry.factory.dag_builders import SETUP_TASK_ID

        return SETUP_TASK_ID

    @property
    def watch_task(self) -> str:
        """The topology DAG's task that reports new dead letters."""
        from airflow_kafka_retry.factory.dag_builders import WATCH_TASK_ID

        return WATCH_TASK_ID

    def lanes_conf(self, *task_ids: str) -> str:
        """A run's conf (``--conf``) that runs only these tasks of the topology DAG (the others skip)."""
        return json.dumps({"lanes": list(task_ids)})

    @property
    def replay_dag_id(self) -> str:
        return f"kafka_dlt_replay__{self.topology.topic}"

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return self.topology.tiers  # the main topic (tier 0) and the retry tiers


#: Where the demo's OpenLineage events (one file each) and metrics go, under the run directory.
LINEAGE_DIR = "openlineage"
METRICS_FILE = "metrics.statsd"


def observability_env(root: Path, statsd_port: int | None) -> dict[str, str]:
    """
    Airflow's own settings that turn metrics and OpenLineage on.

    Metrics go to StatsD with InfluxDB-style tags, OpenLineage events through the file transport.
    """
    (root / LINEAGE_DIR).mkdir(parents=True, exist_ok=True)
    env = {
        # a file per event: tasks running at once never write into one file
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "append": False, "log_file_path": str(root / LINEAGE_DIR / "event")}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "airflow-kafka-retry-demo",
        # the listener gives up on an event after this many seconds (default 10): a busy 2-core machine
        # needs more
        "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "60",
        # emit from a thread of the task, not a forked copy of it: a fork of a process that ran Kafka clients
        # and thread pools can hang, and Airflow kills a task still running 20 s after it succeeded
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
    }
    if statsd_port is not None:
        env.update(
            {
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(statsd_port),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            }
        )
    return env


def prepare(
    root: Path,
    *,
    topic: str,
    bootstrap: str,
    statsd_port: int | None = None,
    database_url: str | None = None,
) -> Deployment:
    """
    Write the topology and the DAG file into a fresh Airflow home under ``root``.

    With ``statsd_port``, Airflow sends its metrics to that StatsD port; ``database_url`` is the metadata
    DB (default: SQLite in the home).
    """
    home = root / "airflow"
    topologies = home / "dags" / "topologies"
    topologies.mkdir(parents=True, exist_ok=True)
    topology_file = topologies / f"{topic}.yaml"
    topology_file.write_text(yaml.safe_dump(topology_mapping(topic), sort_keys=False))
    topology = load_topology(topology_file)
    (home / "dags" / "demo_retry_tiers.py").write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(topology_file),
                handler=HANDLER,
                deserializer=DESERIALIZER,
                asset_server=bootstrap.split(",")[0],
            )
        ).lstrip()
    )
    env = airflow_env(
        home,
        api_port=free_port(),
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        extra={
            DEMO_DIR_ENV: str(root),
            # demo only: every visitor of the UI is an admin, no login
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            **observability_env(root, statsd_port),
        },
        database_url=database_url,
    )
    return Deployment(root, topology, env)
