"""The JSON the "Retry tiers" page shows for one topology: tiers with backlog and runs, DLTs with counts.

Every Kafka read runs in a worker thread with a deadline, so a slow or unreachable broker makes the
page say which topic and what error instead of hanging it. Never payloads; never the Kafka config.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from typing import Any

from airflow_kafka_retry.engine.backlog import scan_backlog
from airflow_kafka_retry.engine.dead_letter_counts import count_dead_letters
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology import load_topology

RunsReader = Callable[[str, int], list[dict[str, Any]]]


def topology_id(path: str) -> str:
    """A stable, URL-safe id of a topology file: its name and a short hash of its path."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"{stem}-{hashlib.sha1(path.encode()).hexdigest()[:6]}"


def list_topologies(settings: ViewSettings) -> list[dict[str, Any]]:
    items = []
    for path in settings.topology_files():
        item: dict[str, Any] = {"id": topology_id(path), "source": path}
        try:
            item["topic"] = load_topology(path).topic
        except (TopologyError, OSError) as exc:
            item["error"] = str(exc)
        items.append(item)
    return items


def find_topology_file(settings: ViewSettings, ident: str) -> str | None:
    return next((p for p in settings.topology_files() if topology_id(p) == ident), None)


def topology_view(path: str, settings: ViewSettings, kafka_config: dict[str, Any], *, now_ms: int,
                  runs_reader: RunsReader, can_trigger: Callable[[str], bool]) -> dict[str, Any]:
    try:
        topology = load_topology(path)
    except (TopologyError, OSError) as exc:
        return {"id": topology_id(path), "source": path, "error": str(exc)}
    timeout = settings.timeout_s
    tiers = [t for t in topology.tiers]
    dead = [t.topic for t in topology.dlt_tiers] + ([topology.parking_topic] if topology.parking_topic else [])
    replay_dag = settings.replay_dag_id_template.format(topic=topology.topic)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kafka-retry-view")
    try:
        backlog_jobs = {t.topic: pool.submit(scan_backlog, kafka_config, t.topic, topology.consumer_group(t),
                                             now_ms=now_ms, timeout_s=timeout) for t in tiers}
        dead_jobs = {topic: pool.submit(count_dead_letters, kafka_config, topic, timeout_s=timeout) for topic in dead}
        view_tiers = []
        for tier in tiers:
            dag_id = settings.dag_id_template.format(topic=tier.topic)
            view_tiers.append({
                "index": tier.index, "topic": tier.topic, "kind": tier.kind, "delay_ms": tier.delay_ms,
                "group": topology.consumer_group(tier), "dag_id": dag_id, "can_trigger": can_trigger(dag_id),
                "backlog": _result(backlog_jobs[tier.topic], tier.topic, timeout),
                "runs": runs_reader(dag_id, settings.runs),
            })
        view_dlts = []
        for topic in dead:
            view_dlts.append({"topic": topic, "kind": "parking" if topic not in
                              {t.topic for t in topology.dlt_tiers} else "dlt",
                              "replay_dag_id": replay_dag, "can_trigger": can_trigger(replay_dag),
                              "counts": _result(dead_jobs[topic], topic, timeout)})
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a scan stuck past its deadline never holds the page
    return {"id": topology_id(path), "source": path, "topic": topology.topic, "group_id": topology.group_id,
            "now_ms": now_ms, "tiers": view_tiers, "dead_letter_topics": view_dlts}


def _result(future: Any, topic: str, timeout: float) -> dict[str, Any]:
    try:
        return future.result(timeout=timeout + 5).to_dict()
    except FutureTimeout:
        return {"topic": topic, "error": f"{topic}: the broker did not answer within {timeout:.0f}s"}
