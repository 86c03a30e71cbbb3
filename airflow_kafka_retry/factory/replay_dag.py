"""``build_dlt_replay_dag``: a manually triggered DAG whose form replays a DLT (dry run by default)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param

from airflow_kafka_retry.dlt.topics import source_topics
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator
from airflow_kafka_retry.policy.topology import Topology, load_topology

#: The task id of the replay (the UI, docs and tests rely on it).
TASK_ID = "replay_dlt"
_FILTERS = ("dlt", "exception", "original_topic", "since", "until", "key", "partition", "offsets", "limit", "to",
            "transform", "dry_run", "replay_id")


def replay_params(topology: Topology) -> dict[str, Param]:
    """The trigger form: filters, target, transform, ``dry_run`` (on by default), replay id."""
    text = ["null", "string"]
    return {
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Only list what would move, and where (task log and XCom). Untick to move."),
        "dlt": Param(None, type=text, title="DLT or parking topic", examples=source_topics(topology),
                     description=f"Default: {topology.dlt_topic}. 'parking' for {topology.parking_topic}."),
        "exception": Param(None, type=text, title="Exception class",
                           description="Dotted class, subclasses included where importable; comma-separated for "
                                       "several (e.g. myapp.errors.InvalidOrder)."),
        "original_topic": Param(None, type=text, title="Original topic", examples=[topology.topic]),
        "since": Param(None, type=text, title="Failed since",
                       description="Epoch ms, ISO-8601 time (UTC unless it has an offset) or a duration ago (2h)."),
        "until": Param(None, type=text, title="Failed until", description="Same forms as 'Failed since'."),
        "key": Param(None, type=text, title="Record key", description="UTF-8 key of the records to replay."),
        "partition": Param(None, type=text, title="DLT partitions", description="e.g. 0 or 0,2"),
        "offsets": Param(None, type=text, title="DLT offsets", description="A-B (inclusive), A- or A."),
        "limit": Param(None, type=["null", "integer"], minimum=1, title="Limit",
                       description="At most this many records, oldest first."),
        "to": Param(None, type=text, title="Target", examples=["main", "first-tier"],
                    description="main, first-tier or a topic. Default: each record's original topic."),
        "transform": Param(None, type=text, title="Transform",
                           description="package.module:function that gets each record and returns it edited, or "
                                       "None to leave it out. It must be importable by the Airflow worker."),
        "replay_id": Param(None, type=text, title="Replay id",
                           description="Default: derived from the run. Give the id of a stopped replay to finish it."),
    }


def build_dlt_replay_dag(topology: str | Path | Topology, *, kafka_conn_id: str = "kafka_default",
                         dag_id: str | None = None, **dag_kwargs: Any) -> DAG:
    """A DAG with one :class:`ReplayDltOperator` task (``replay_dlt``), triggered by hand with a form.

    :param topology: path of the topology YAML (the worker reads it at run time), or a :class:`Topology`.
    :param kafka_conn_id: the Kafka connection.
    :param dag_id: default ``kafka_dlt_replay__<main topic>``.
    :param dag_kwargs: more :class:`~airflow.sdk.DAG` arguments (``tags``, ``default_args``...); by
        default ``schedule=None`` (manual), one run at a time, native rendering of the params.
    """
    model = topology if isinstance(topology, Topology) else load_topology(topology)
    path: str | Topology = topology if isinstance(topology, Topology) else str(topology)
    settings: dict[str, Any] = {
        "schedule": None,
        "start_date": datetime(2024, 1, 1),
        "catchup": False,
        "max_active_runs": 1,
        "tags": ["kafka-retry", "dlt"],
        "render_template_as_native_obj": True,
        "doc_md": f"Replay records of the dead-letter topics of `{model.topic}` (retry topology "
                  f"`{model.source}`). Trigger with the form: a dry run (the default) lists what would move in "
                  f"the task log and XCom; untick *Dry run* to move the records, each exactly once.",
        **dag_kwargs,
    }
    settings["params"] = {**replay_params(model), **dag_kwargs.get("params", {})}
    with DAG(dag_id or f"kafka_dlt_replay__{model.topic}", **settings) as dag:
        ReplayDltOperator(task_id=TASK_ID, topology=path, kafka_conn_id=kafka_conn_id,
                          **{name: f"{{{{ params.{name} }}}}" for name in _FILTERS})
    return dag
