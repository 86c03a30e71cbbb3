"""
``airflow-kafka-retry demo``: the retry path end to end, run by real Airflow on an embedded broker.

Orders stream into a main topic; the factory-built topology DAG, a task per tier (the main topic as
tier 0, two short retry tiers), runs them under the Airflow scheduler when their records are due (or
``airflow dags test`` with ``fast``), with DLT notifiers; live progress per tier; then the bug is fixed
and the DLT replayed with the replay DAG; the demo ends with where every order went (it must add up)
and a picture.
No Airflow import here: the handler in :mod:`airflow_kafka_retry.demo.orders` runs in workers.
"""

from __future__ import annotations

from pathlib import Path


def main(
    bootstrap: str | None,
    *,
    orders: int = 200,
    partitions: int = 3,
    fast: bool = False,
    out_dir: str | Path | None = None,
    kafka: bool = False,
    postgres: bool = False,
    screenshot: str | Path | None = None,
) -> int:
    """
    Run the demo on ``bootstrap``, or on a broker started for it (Tansu; ``kafka``: Apache Kafka).

    ``kafka`` starts a real single-node Apache Kafka from its Maven jars (``sandbox/kafka.py``).
    """
    from airflow_kafka_retry.demo.launch import run_demo

    return run_demo(
        bootstrap=bootstrap,
        orders=orders,
        partitions=partitions,
        fast=fast,
        out_dir=Path(out_dir) if out_dir else None,
        kafka=kafka,
        postgres=postgres,
        screenshot=Path(screenshot) if screenshot else None,
    )
