"""
Where the "Retry tiers" view finds its topologies and DAGs: the ``[kafka_retry]`` Airflow config section.

``topologies``: comma-separated topology files or glob patterns (default: ``topologies/*.yaml`` and
``*.yml`` under the DAGs folder). ``kafka_conn_id``: the connection the server reads Kafka with.
``dag_id_template`` / ``replay_dag_id_template``: how the retry and replay DAGs are named, as in
``build_retry_dags`` / ``build_dlt_replay_dag``; ``layout``: the DAG layout ``build_retry_dags`` was
given. ``timeout``: seconds a broker may take per topic (a DLT page's record listing too);
``replay_timeout``: seconds a DLT page's dry run and replay log reads may take.
``redrive_kafka_conn_id``: the connection a DLT page's *Stop* writes with (the ``replay`` role's principal:
``kafka_conn_id``'s, the ``view`` role's, only reads); empty, the default: the page offers no *Stop*.
``cache_ttl``: seconds a topology's Kafka reads are reused; ``max_scans``: Kafka scans at once per API-server
process (each of ``airflow api-server --workers N`` has its own). One option is the triggerer's:
``shared_watch_consumers`` (the event triggers' watchers share a Kafka consumer; default on).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

SECTION = "kafka_retry"
#: option -> (default, type, description); also published as the provider's config (get_provider_info).
OPTIONS: dict[str, tuple[str, str, str]] = {
    "topologies": (
        "{dags_folder}/topologies/*.yaml,{dags_folder}/topologies/*.yml",
        "string",
        "Comma-separated topology files or glob patterns the Retry tiers view shows.",
    ),
    "kafka_conn_id": (
        "kafka_default",
        "string",
        "The Kafka connection the API server reads the topics with.",
    ),
    "dag_id_template": ("kafka_retry__{topic}", "string", "How retry DAGs are named (build_retry_dags)."),
    "layout": (
        "topology",
        "string",
        "How build_retry_dags laid the DAGs out: topology (one DAG per topology, the default) or tiers.",
    ),
    "replay_dag_id_template": (
        "kafka_dlt_replay__{topic}",
        "string",
        "How DLT replay DAGs are named (build_dlt_replay_dag), from the main topic.",
    ),
    "timeout": ("10", "float", "Seconds the broker may take per topic before the view reports it."),
    "runs": ("5", "integer", "How many recent runs of each tier the view lists."),
    "replay_timeout": (
        "60",
        "float",
        (
            "Seconds a DLT page's dry run (it reads the whole DLT and its replay log), its reads of the "
            "replay log (the redrives' progress and audit) and a stop request may take before the view "
            "answers that they did not finish."
        ),
    ),
    "redrive_kafka_conn_id": (
        "",
        "string",
        (
            "The Kafka connection a DLT page's Stop writes a replay's stop request with: one holding the "
            "replay role's principal (kafka_conn_id's, the view role's, only reads). Empty: the page offers "
            "no Stop; airflow-kafka-retry dlt replay-stop stops a replay."
        ),
    ),
    "cache_ttl": (
        "5",
        "float",
        (
            "Seconds the view reuses a topology's Kafka reads (backlog, DLT counts) "
            "before reading the broker again; 0 reads it on every refresh."
        ),
    ),
    "max_scans": (
        "4",
        "integer",
        (
            "At most this many Kafka scans (one per topic) run at once in each API-server "
            "process, for all its users together (with --workers N, each worker has its own cap)."
        ),
    ),
    "shared_watch_consumers": (
        "True",
        "boolean",
        (
            "The triggerer's event-mode watchers share one Kafka consumer per connection (fewer threads, "
            "connections, memory and CPU with many topologies; see docs/capacity.md). False: one "
            "consumer per watched lane."
        ),
    ),
}


def provider_config() -> dict[str, object]:
    """The ``config`` entry of ``get_provider_info()``."""
    return {
        SECTION: {
            "description": 'The "Retry tiers" view in the Airflow UI.',
            "options": {
                key: {
                    "description": text,
                    "version_added": "0.1.0",
                    "type": kind,
                    "example": None,
                    "default": default,
                }
                for key, (default, kind, text) in OPTIONS.items()
            },
        }
    }


@dataclass(frozen=True)
class ViewSettings:
    """The view's ``[kafka_retry]`` settings, as read from Airflow's configuration."""

    topologies: tuple[str, ...]
    kafka_conn_id: str
    dag_id_template: str
    replay_dag_id_template: str
    timeout_s: float
    runs: int
    cache_ttl_s: float = 5.0
    max_scans: int = 4
    layout: str = "topology"
    replay_timeout_s: float = 60.0
    redrive_kafka_conn_id: str = ""

    def topology_files(self) -> list[str]:
        """The topology files the patterns match, in a stable order (a path that exists counts as itself)."""
        found: list[str] = []
        for pattern in self.topologies:
            matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
            found.extend(
                m for m in matches if m not in found and (os.path.isfile(m) or not glob.has_magic(pattern))
            )
        return found


def load_settings() -> ViewSettings:
    from airflow.providers.common.compat.sdk import conf

    def get(key: str) -> str:
        return conf.get(SECTION, key, fallback=OPTIONS[key][0])

    dags_folder = conf.get("core", "dags_folder")
    patterns = tuple(
        p.strip().replace("{dags_folder}", dags_folder) for p in get("topologies").split(",") if p.strip()
    )
    return ViewSettings(
        topologies=patterns,
        kafka_conn_id=get("kafka_conn_id"),
        dag_id_template=get("dag_id_template"),
        replay_dag_id_template=get("replay_dag_id_template"),
        timeout_s=float(get("timeout")),
        runs=int(get("runs")),
        cache_ttl_s=float(get("cache_ttl")),
        max_scans=max(1, int(get("max_scans"))),
        layout=_layout(get("layout")),
        replay_timeout_s=float(get("replay_timeout")),
        redrive_kafka_conn_id=get("redrive_kafka_conn_id").strip(),
    )


def kafka_config(settings: ViewSettings, conn_id: str | None = None) -> dict[str, Any]:
    """
    The librdkafka configuration of ``conn_id`` (default ``[kafka_retry] kafka_conn_id``).

    Server side only: never shown, logged nor sent to the browser.
    """
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    return KafkaRetryHook(kafka_config_id=conn_id or settings.kafka_conn_id).kafka_config()


def _layout(value: str) -> str:
    """``[kafka_retry] layout``: ``topology`` or ``tiers``; anything else is an error naming the setting."""
    if value not in ("topology", "tiers"):
        raise ValueError(f"[{SECTION}] layout must be topology or tiers, got {value!r}")
    return value
