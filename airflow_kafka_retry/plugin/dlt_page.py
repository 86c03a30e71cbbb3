"""
The JSON of a dead-letter topic's page in the "Retry tiers" view: its records, a dry run, a redrive's conf.

A record is shown by its DLT coordinates, age, family, failure and origin (what its headers say, bounded);
never its key or value. A dry run is shown as :class:`~airflow_kafka_retry.dlt.summary.ReplaySummary`
counts and moves (coordinates to target), with the replay DAG conf that redrives exactly what it listed
(:func:`redrive_conf`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.scans.dead_letter_counts import failure_label
from airflow_kafka_retry.policy.dead_letters.fields import dead_letter_fields

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord
    from airflow_kafka_retry.dlt.summary import ReplaySummary
    from airflow_kafka_retry.policy.topology.model import Topology

#: The filters a DLT page offers: the replay DAG's params of the same names (never a key: keys are data).
FILTERS = ("exception", "original_topic", "since", "until", "partition", "offsets", "limit")
#: At most this many moves a dry run lists on the page (the counts cover them all).
MOVES_SHOWN = 500


def dead_topic_kind(topology: Topology, topic: str) -> str:
    """``dlt`` (the topology's), ``dlq`` (another framework's queue it names) or ``parking``."""
    if topic in {t.topic for t in topology.dlt_tiers}:
        return "dlt"
    return "dlq" if topic in set(topology.dead_letter_queue_topics) else "parking"


def page_meta(
    topology: Topology,
    topic: str,
    *,
    replay_dag_id: str,
    targets: list[str] | None,
    can_redrive: bool,
    can_audit: bool,
    can_stop: bool,
) -> dict[str, Any]:
    """
    What the page says of the topic and what this user may do there.

    :param targets: what the replay DAG's form offers (None: the DAG is not in Airflow: no redrive).
    :param can_redrive: the user may trigger the replay DAG (the dry run, *Redrive* and *Stop*).
    :param can_audit: the user may read the replay DAG's runs (the past redrives and their progress).
    :param can_stop: the view may write stop requests (``[kafka_retry] redrive_kafka_conn_id`` is set).
    """
    return {
        "topic": topic,
        "kind": dead_topic_kind(topology, topic),
        "family": topology.queue_family(topic),
        "replay_dag_id": replay_dag_id,
        "replay_dag_found": targets is not None,
        "can_redrive": can_redrive and targets is not None,
        "can_stop": can_redrive and targets is not None and can_stop,
        "can_audit": can_audit,
        "targets": list(targets or ()) if can_redrive else [],
    }


def record_row(record: DltRecord, now_ms: int) -> dict[str, Any]:
    """A record by its coordinates, age, family, failure and origin; never its key or value."""
    letter = record.dead_letter
    return {
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "age_s": max(0.0, (now_ms - record.timestamp_ms) / 1000),
        "exception": failure_label(letter),
        **dead_letter_fields(letter),
    }


def redrive_conf(summary: ReplaySummary) -> dict[str, Any]:
    """
    The replay DAG conf that moves what the dry run ``summary`` listed (without ``rate`` and ``replay_id``).

    Its filters as the dry run resolved them: a duration ago is a fixed time, and ``until`` is at most the
    dry run's start, so records dead-lettered after it are left for the next one.
    """
    f = summary.filters
    until = summary.started_ms if f.get("until_ms") is None else min(f["until_ms"], summary.started_ms)
    offsets = f.get("offsets")
    conf: dict[str, Any] = {
        "dlt": summary.dlt,
        "exception": ",".join(f.get("exception") or ()) or None,
        "original_topic": ",".join(f.get("original_topic") or ()) or None,
        "since": None if f.get("since_ms") is None else str(f["since_ms"]),
        "until": str(until),
        "partition": ",".join(map(str, f.get("partition") or ())) or None,
        "offsets": None if not offsets else f"{offsets[0]}-{'' if offsets[1] is None else offsets[1]}",
        "limit": f.get("limit"),
        "to": summary.to,
    }
    return {key: value for key, value in conf.items() if value is not None}


def with_triggering_users(
    statuses: list[dict[str, Any]],
    replay_dag_id: str,
    users: Callable[[str, list[str]], Mapping[str, str | None]],
) -> list[dict[str, Any]]:
    """
    Each replay status with ``triggered_by``: the Airflow user who triggered the replay DAG's run that ran it.

    Only for runs of ``replay_dag_id`` (as the status's ``started_by.airflow`` names them; ``users`` asks
    Airflow); None for a replay started elsewhere (the command line, another DAG).
    """

    def run_of(status: Mapping[str, Any]) -> str | None:
        airflow = (status.get("started_by") or {}).get("airflow") or {}
        return (
            str(airflow["run_id"])
            if airflow.get("dag_id") == replay_dag_id and airflow.get("run_id")
            else None
        )

    run_ids = sorted({run for s in statuses if (run := run_of(s)) is not None})
    found = users(replay_dag_id, run_ids) if run_ids else {}
    return [{**s, "triggered_by": found.get(run_of(s) or "")} for s in statuses]


def dry_run_answer(summary: ReplaySummary) -> dict[str, Any]:
    """A dry run as the page shows it: counts, targets, the moves (coordinates only), the redrive's conf."""
    keep = (
        "dlt",
        "replay_log",
        "filters",
        "to",
        "started_ms",
        "scanned",
        "matched",
        "already_replayed",
        "beyond_limit",
        "not_replayable",
        "not_replayable_records",
        "targets",
        "moves_truncated",
    )
    data = summary.to_dict()
    return {
        **{key: data[key] for key in keep},
        "would_move": summary.selected - summary.moved_before,
        "moves": data["moves"],
        "conf": redrive_conf(summary),
    }
