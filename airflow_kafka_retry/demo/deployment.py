"""
The demo's throw-away Airflow home: topology file, DAG file and the environment of every Airflow process.

The tier DAGs are the factory's (``build_retry_dags`` with ``include_main=True``, so the main topic
runs as tier 0 too), event-driven (the default), with the DLT notifiers (``DltLogNotifier`` and the
demo's alert recorder), the DLT-watch DAG and the setup DAG; the replay DAG is ``build_dlt_replay_dag``'s.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_kafka_retry.demo.orders import DEMO_DIR_ENV, InvalidOrder
from airflow_kafka_retry.policy.topology_file import load_topology
from airflow_kafka_retry.testing.airflow_stack import airflow_env, free_port

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology import Tier, Topology

DELAYS = ("10s", "20s")
#: The main topic's DAG (delay 0) and the 10 s tier are scheduled at this floor (the factory's default
#: is 30 s).
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
    def database_url(self) -> str:
        """The metadata DB's SQLAlchemy URL: a SQLite file in the home, or PostgreSQL (``--postgres``)."""
        return self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]

    @property
    def database_name(self) -> str:
        return "PostgreSQL" if self.database_url.startswith("postgresql") else "SQLite"

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
                min_schedule=int(MIN_SCHEDULE.total_seconds()),
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
