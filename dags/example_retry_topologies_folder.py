"""
Every topology YAML of ``topology_folder/`` as event-driven retry DAGs, from this one DAG file.

How a platform team holds many topologies: one YAML per topology in a folder, one DAG file. Airflow's
DAG processor parses one file for all of them (the provider is imported once, not once per topology).
Each YAML gets the DAG ``build_retry_dags`` builds (one per topology: ``kafka_retry__payments``,
``kafka_retry__shipments``). A YAML that cannot be built is
logged by the DAG processor, naming the file, and skipped: the other topologies keep their DAGs
(``strict=True`` makes it an import error of this file instead).
"""

from __future__ import annotations

from pathlib import Path

from airflow_kafka_retry import build_retry_dags_from_folder

globals().update(
    build_retry_dags_from_folder(
        Path(__file__).parent / "topology_folder",
        handler="handlers.orders:handle",
        default_args={"retries": 1},
        tags=["platform"],
    )
)
