"""``build_dlt_replay_dag``: a manually triggered DAG whose form replays a DLT (dry run by default)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param

from airflow_kafka_retry.dlt.replay_targets import source_topics
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

#: The task id of the replay (the UI, docs and tests rely on it).
TASK_ID = "replay_dlt"
_FILTERS = (
    "dlt",
    "exception",
    "original_topic",
    "since",
    "until",
    "key",
    "partition",
    "offsets",
    "limit",
    "to",
    "transform",
    "dry_run",
    "replay_id",
    "rate",
)


def replay_params(
    topology: Topology, transforms: Mapping[str, str] | None = None, allowed_targets: Sequence[str] = ()
) -> dict[str, Param]:
    """The trigger form: filters, target, transform (a name the DAG allows), ``dry_run`` (on), replay id."""
    text = ["null", "string"]
    names = sorted(transforms or {})
    own = [t.topic for t in topology.tiers]
    targets = own + [t for t in allowed_targets if t not in own]
    return {
        "dry_run": Param(
            True,
            type="boolean",
            title="Dry run",
            description="Only list what would move, and where (task log and XCom). Untick to move.",
        ),
        "dlt": Param(
            None,
            type=text,
            title="DLT or parking topic",
            examples=source_topics(topology),
            description=f"Default: {topology.dlt_topic}. 'parking' for {topology.parking_topic}.",
        ),
        "exception": Param(
            None,
            type=text,
            title="Exception class",
            description="Dotted class name; subclasses match where the class is already "
            "loaded by the worker. Comma-separated for several "
            "(e.g. myapp.errors.InvalidOrder).",
        ),
        "original_topic": Param(None, type=text, title="Original topic", examples=[topology.topic]),
        "since": Param(
            None,
            type=text,
            title="Failed since",
            description="Epoch ms, ISO-8601 time (UTC unless it has an offset) or a duration ago (2h).",
        ),
        "until": Param(None, type=text, title="Failed until", description="Same forms as 'Failed since'."),
        "key": Param(None, type=text, title="Record key", description="UTF-8 key of the records to replay."),
        "partition": Param(None, type=text, title="DLT partitions", description="e.g. 0 or 0,2"),
        "offsets": Param(None, type=text, title="DLT offsets", description="A-B (inclusive), A- or A."),
        "limit": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            title="Limit",
            description="At most this many records, oldest first.",
        ),
        "to": Param(
            None,
            type=text,
            title="Target",
            examples=["main", "first-tier", *targets],
            description="main, first-tier or one of: "
            + ", ".join(targets)
            + ". Default: each record's original topic (it must be one of those too).",
        ),
        "transform": Param(
            None,
            type=text,
            title="Transform",
            enum=[None, *names],
            description=(
                "One of the transforms this DAG allows: " + ", ".join(names)
                if names
                else "This DAG allows no transform."
            )
            + " It gets each record and returns it edited, or None to leave it "
            "out.",
        ),
        "rate": Param(
            None,
            type=["null", "string", "number"],
            title="Rate",
            description="At most this many records per second (200/s or 200). Default: as fast as Kafka "
            "takes them. Stop a running replay with 'airflow-kafka-retry dlt replay-stop'.",
        ),
        "replay_id": Param(
            None,
            type=text,
            title="Replay id",
            description="Default: derived from the run. Give the id of a stopped replay to finish it.",
        ),
    }


def offered_targets(to_schema: Mapping[str, Any]) -> list[str]:
    """
    The targets a replay DAG's form offers (``main``, ``first-tier``, its tiers, its ``allowed_targets``).

    Read from the schema of its ``to`` param (its examples, as :func:`replay_params` writes them) in the DAG
    as Airflow serialized it: the "Retry tiers" view's dry run allows the same targets as the DAG's run.
    """
    return [str(t) for t in to_schema.get("examples") or ()]


def check_transforms(transforms: Mapping[str, str] | None) -> dict[str, str]:
    """The allowlist as given, each entry checked for shape (nothing is imported when the DAG is parsed)."""
    checked: dict[str, str] = {}
    for name, path in (transforms or {}).items():
        if not isinstance(name, str) or not name.strip() or ":" in name:
            raise UserCodeError(
                f"transforms: {name!r} is not a transform name (use a short name such as "
                "'fix_currency', mapped to 'package.module:function')"
            )
        module, sep, function = str(path).partition(":")
        if not sep or not module or not function:
            raise UserCodeError(f"transforms[{name!r}] = {path!r} must be given as 'package.module:function'")
        checked[name] = str(path)
    return checked


def build_dlt_replay_dag(
    topology: str | Path | Topology,
    *,
    kafka_conn_id: str = "kafka_default",
    dag_id: str | None = None,
    transforms: Mapping[str, str] | None = None,
    allowed_targets: Sequence[str] = (),
    **dag_kwargs: Any,
) -> DAG:
    """
    A DAG with one :class:`ReplayDltOperator` task (``replay_dlt``), triggered by hand with a form.

    Whoever may trigger the DAG picks filters, a target and a transform in the form; the code a
    replay may run and the topics it may write are the DAG author's choice, made here.

    :param topology: path of the topology YAML (the worker reads it at run time), or a :class:`Topology`.
    :param kafka_conn_id: the Kafka connection.
    :param dag_id: default ``kafka_dlt_replay__<main topic>``.
    :param transforms: the transforms the form offers, by name: ``{"fix_currency":
        "handlers.replay_fixes:fix_currency"}``. A run given any other value fails before reading a
        record; nothing is imported for it. Default: none.
    :param allowed_targets: topics beyond the topology's main topic and retry tiers that a run may
        replay records to. Default: none.
    :param dag_kwargs: more :class:`~airflow.sdk.DAG` arguments (``tags``, ``default_args``...); by
        default ``schedule=None`` (manual), one run at a time, native rendering of the params.
    """
    model = topology if isinstance(topology, Topology) else load_topology(topology)
    allowed = check_transforms(transforms)
    targets = [str(t) for t in allowed_targets]
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
    settings["params"] = {**replay_params(model, allowed, targets), **dag_kwargs.get("params", {})}
    # each filter is the form's field, rendered into the operator's argument when the task runs
    templated: dict[str, Any] = {name: f"{{{{ params.{name} }}}}" for name in _FILTERS}
    with DAG(dag_id or f"kafka_dlt_replay__{model.topic}", **settings) as dag:
        ReplayDltOperator(
            task_id=TASK_ID,
            topology=path,
            kafka_conn_id=kafka_conn_id,
            transforms=allowed,
            allowed_targets=targets,
            **templated,
        )
    return dag
