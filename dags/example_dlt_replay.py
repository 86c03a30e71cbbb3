"""
Replay the ``orders`` dead-letter topics by hand, from a form in the Airflow UI.

Trigger ``kafka_dlt_replay__orders`` with its form: filters (exception class, original topic,
failure time, key, DLT partitions and offsets, limit), a target, a transform chosen by name from
the ones this DAG allows (``add_default_customer``), and *Dry run* (on by default: the task log and
XCom list what would move, and where). Untick it to move the records: each exactly once, with
audit headers; one that fails again ends in ``orders-parking``.

The transforms a run may use, and any target beyond ``orders`` and its retry tiers, are listed here
by the DAG author; whoever triggers the DAG only picks from them.
"""

from __future__ import annotations

from pathlib import Path

from airflow_kafka_retry import build_dlt_replay_dag

dag = build_dlt_replay_dag(
    Path(__file__).parent / "topologies" / "orders.yaml",
    kafka_conn_id="kafka_default",
    transforms={"add_default_customer": "handlers.replay_fixes:add_default_customer"},
    allowed_targets=[],  # topics beyond orders and its retry tiers that a replay may write to: none
)
