"""The demo's throw-away Airflow home: topology file, DAG file and the environment of every Airflow process.

The tier DAGs are the factory's (``build_retry_dags`` with ``include_main=True``, so the main topic
runs as tier 0 too), event-driven (the default), with the DLT notifiers (``DltLogNotifier`` and the
demo's alert recorder), the DLT-watch DAG and the setup DAG; the replay DAG is ``build_dlt_replay_dag``'s.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from airflow_kafka_retry.demo.orders import DEMO_DIR_ENV, InvalidOrder
from airflow_kafka_retry.policy.topology import Tier, Topology, load_topology
from airflow_kafka_retry.testing.airflow_stack import airflow_env, free_port

DELAYS = ("10s", "20s")
#: The main topic's DAG (delay 0) and the 10 s tier are scheduled at this floor (the factory's default is 30 s).
MIN_SCHEDULE = timedelta(seconds=5)
DAG_ID_TEMPLATE = "kafka_retry__{topic}"
HANDLER = "airflow_kafka_retry.demo.orders:handle_orders"
DESERIALIZER = "airflow_kafka_retry.demo.orders:decode_order"

DAG_FILE = '''
"""The demo's DAGs (written by ``airflow-kafka-retry demo``): one per tier, the DLT watch, the replay."""
from datetime import timedelta

from airflow_kafka_retry import build_dlt_replay_dag, build_retry_dags
from airflow_kafka_retry.demo.orders import record_alert
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier

TOPOLOGY = {topology!r}

globals().update(build_retry_dags(
    TOPOLOGY,
    handler={handler!r},
    value_deserializer={deserializer!r},
    include_main=True,
    min_schedule=timedelta(seconds={min_schedule}),
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
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.env['AIRFLOW__API__PORT']}"

    def dag_id(self, topic: str) -> str:
        return DAG_ID_TEMPLATE.format(topic=topic)

    @property
    def setup_dag_id(self) -> str:
        """The factory's ``@once`` DAG that creates the retry path's topics."""
        from airflow_kafka_retry.factory.retry_dags import SETUP_SUFFIX

        return self.dag_id(self.topology.topic) + SETUP_SUFFIX

    @property
    def replay_dag_id(self) -> str:
        return f"kafka_dlt_replay__{self.topology.topic}"

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return self.topology.tiers  # the main topic (tier 0) and the retry tiers


def prepare(root: Path, *, topic: str, bootstrap: str) -> Deployment:
    """Write the topology and the DAG file into a fresh Airflow home under ``root``."""
    home = root / "airflow"
    topologies = home / "dags" / "topologies"
    topologies.mkdir(parents=True, exist_ok=True)
    topology_file = topologies / f"{topic}.yaml"
    topology_file.write_text(yaml.safe_dump(topology_mapping(topic), sort_keys=False))
    topology = load_topology(topology_file)
    (home / "dags" / "demo_retry_tiers.py").write_text(textwrap.dedent(DAG_FILE.format(
        topology=str(topology_file), handler=HANDLER, deserializer=DESERIALIZER,
        min_schedule=int(MIN_SCHEDULE.total_seconds()), asset_server=bootstrap.split(",")[0])).lstrip())
    env = airflow_env(home, api_port=free_port(), connections={"kafka_default": {
        "conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}}, extra={
        DEMO_DIR_ENV: str(root),
        # demo only: every visitor of the UI is an admin, no login
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    })
    return Deployment(root, topology, env)
