"""
Real Airflow deployments of retry topologies for the benches: deploy, measure a window, count runs.

Each deployment is a real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
SQLite, or on a private PostgreSQL server; ``sandbox/airflow_stack.py``) with the factory's DAGs on a real
broker. A window counts the DAG runs and task instances created and the CPU seconds of each Airflow
component's process tree (tasks included) and of the broker.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_retry_topics
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import COMPONENTS, AirflowCluster, airflow_env
from airflow_kafka_retry.sandbox.scratch_topics import create_topics

if TYPE_CHECKING:
    from testkit.airflow_postgres import AirflowDatabases

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 2
WARM_UP_S = 90
#: ``build_retry_dags(layout=...)``: one DAG and one watcher per topology, or a DAG and a watcher per tier
DAG_LAYOUTS = ("topology", "tiers")
#: Airflow's default ``[dag_processor] min_file_process_interval``, the benches' unless told otherwise.
PARSE_INTERVAL_S = 30

DAG_FILE = """
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.timed_handler:handle",
    include_main={include_main},
    dag_id_template="{prefix}__{{topic}}",
    default_args={{"retries": 0}},
    trigger={trigger!r},
    layout={dag_layout!r},
    min_schedule=timedelta(seconds=10),
))
"""


FOLDER_DAG_FILE = """
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags_from_folder

dags = build_retry_dags_from_folder(
    {folder!r},
    handler="tests.support.timed_handler:handle",
    include_main=True,
    default_args={{"retries": 0}},
    min_schedule=timedelta(seconds=10),
    auto_register=False,  # only the DAGs put in globals() below are collected
    shard={shard!r},
    layout={dag_layout!r},
)
# the bench created every topic (what each topology's @once setup DAG does in the "tiers" layout): no setup
# DAG, no 2N task starts ("topology": the setup is a task of the topology's DAG, run by its sweeps only)
globals().update({{k: v for k, v in dags.items() if not k.endswith("__ensure_topics")}})
"""


def cpu_seconds(proc: psutil.Process) -> float:
    """
    CPU seconds of a process tree: every live process's own, and what each reaped from its dead children.

    A task process ends; its supervisor, a live executor worker, reaped it.
    """
    total = 0.0
    try:
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for member in tree:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


#: Other processes whose CPU every window reports (``watch_process``): the metadata DB's server.
_WATCHED: dict[str, int] = {}


def watch_process(name: str, pid: int) -> None:
    """Report the CPU of ``pid``'s process tree (its reaped children included) in every window as ``name``."""
    _WATCHED[name] = pid


def cpu(cluster: AirflowCluster, broker_pid: int | None) -> dict[str, float]:
    """CPU seconds of each Airflow component's process tree, of the broker's (unless None) and the watched."""
    found = {name: cpu_seconds(psutil.Process(p.pid)) for name, p in cluster.processes.items()}
    if broker_pid is not None:
        found["broker"] = cpu_seconds(psutil.Process(broker_pid))
    for name, pid in _WATCHED.items():
        found[name] = cpu_seconds(psutil.Process(pid))
    return found


def counts(cluster: AirflowCluster) -> tuple[int, int]:
    [(runs,)] = cluster.query("SELECT count(*) FROM dag_run")
    [(tis,)] = cluster.query("SELECT count(*) FROM task_instance")
    return runs, tis


def topology_file(home: Path, name: str, delays: tuple[str, ...]) -> Path:
    path = home / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "topic": name,
                "group_id": f"{name}-svc",
                "attempts": len(delays) + 1,
                "backoff": {"kind": "custom", "delays": list(delays)},
            }
        )
    )
    return path


def deploy(
    bootstrap: str,
    home: Path,
    topologies: list[tuple[str, tuple[str, ...]]],
    trigger: str,
    *,
    include_main: bool = False,
    ledger: Path | None = None,
    layout: str = "per_file",
    databases: AirflowDatabases | None = None,
    shards: int = 1,
    dag_layout: str = "topology",
    shared_watch_consumers: bool = True,
    parse_interval: int = PARSE_INTERVAL_S,
) -> AirflowCluster:
    """
    Start an Airflow running ``topologies`` (name, retry delays) on the broker at ``bootstrap``.

    ``layout``: the DAG files, ``per_file`` (one per topology) or ``folder`` (one folder file, or
    ``shards`` files); ``dag_layout``: the factory's ``layout=``, ``topology`` or ``tiers`` (schedule mode
    has only ``tiers``); ``shared_watch_consumers``: the triggerer's watchers share one consumer
    (``[kafka_retry] shared_watch_consumers``, the default; off: a consumer per watched lane);
    ``parse_interval``: ``[dag_processor] min_file_process_interval`` (``PARSE_INTERVAL_S``: Airflow's).
    """
    if dag_layout not in DAG_LAYOUTS:
        raise ValueError(f"dag_layout must be one of {', '.join(DAG_LAYOUTS)}, got {dag_layout!r}")
    database_url = databases.new() if databases is not None else None
    env = airflow_env(
        home,
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        extra={
            "AKR_TIMED_LEDGER": str(ledger or home / "handled.jsonl"),
            "AIRFLOW__CORE__PARALLELISM": "8",
            # Airflow's default parse interval unless told, said here for the capacity table (the test
            # stacks' is 600 s)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(parse_interval),
            # an idle topology's DAGs must not pay for byte-compiling the provider at every parse
            "PYTHONDONTWRITEBYTECODE": "",
            # a folder of many topologies is one file: on a loaded machine its parse can outlast the
            # default timeouts (30 s import, 50 s processor); raised so the parse is measured, not killed
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "900",
            "AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS": str(shared_watch_consumers),
        },
        pythonpath=[REPO],
        database_url=database_url,
    )
    if layout == "folder":  # one DAG file for every topology YAML of a folder (capacity)
        folder = home / "topologies"
        folder.mkdir(exist_ok=True)
        create_topics(bootstrap, [name for name, _ in topologies], PARTITIONS)
        for name, delays in topologies:
            path = topology_file(home, name, delays).rename(folder / f"{name}.yaml")
            ensure_retry_topics(load_topology(path), {"bootstrap.servers": bootstrap})
        # shards > 1: one DAG file per shard, each DB write then locks only its shard's DAGs
        for index in range(shards):
            name = "retry_topologies.py" if shards == 1 else f"retry_topologies_{index:03d}.py"
            shard = None if shards == 1 else (index, shards)
            (home / "dags" / name).write_text(
                FOLDER_DAG_FILE.format(folder=str(folder), shard=shard, dag_layout=dag_layout)
            )
        topologies = []
    for name, delays in topologies:
        create_topics(bootstrap, [name], PARTITIONS)
        (home / "dags" / f"{name}.py").write_text(
            textwrap.dedent(
                DAG_FILE.format(
                    topology=str(topology_file(home, name, delays)),
                    include_main=include_main,
                    prefix=name.replace("-", "_"),
                    trigger=trigger,
                    dag_layout=dag_layout,
                )
            )
        )
    return AirflowCluster(home, env, cwd=REPO, migrated=database_url is not None).start()


def deployed(cluster: AirflowCluster) -> dict[str, int]:
    """
    What the metadata DB holds: the DAGs parsed (not stale), the asset watchers, their triggers running.

    ``triggers`` counts every trigger, a deferred task's too; ``watchers_running``, only the watchers'.
    """
    [(dags,)] = cluster.query("SELECT count(*) FROM dag WHERE is_stale = false")
    [(watchers,)] = cluster.query("SELECT count(*) FROM asset_watcher")
    [(running,)] = cluster.query(
        "SELECT count(*) FROM asset_watcher w JOIN trigger t ON t.id = w.trigger_id "
        "WHERE t.triggerer_id IS NOT NULL"
    )
    [(triggers,)] = cluster.query("SELECT count(*) FROM trigger")
    return {"dags": dags, "asset_watchers": watchers, "watchers_running": running, "triggers": triggers}


def measure_window(
    cluster: AirflowCluster,
    broker_pid: int | None,
    seconds: float,
    *,
    during: Callable[[], None] | None = None,
) -> dict[str, Any]:
    runs0, tis0 = counts(cluster)
    cpu0 = cpu(cluster, broker_pid)
    started = time.monotonic()
    if during is not None:
        during()
    while time.monotonic() - started < seconds:
        cluster.check_alive()
        time.sleep(1)
    elapsed = time.monotonic() - started
    runs1, tis1 = counts(cluster)
    cpu1 = cpu(cluster, broker_pid)
    spent = {name: round(cpu1[name] - cpu0[name], 2) for name in cpu1}
    airflow = round(sum(spent[name] for name in COMPONENTS), 2)
    return {
        "seconds": round(elapsed, 1),
        "dag_runs": runs1 - runs0,
        "task_instances": tis1 - tis0,
        "cpu_seconds": spent,
        "airflow_cpu_seconds": airflow,
        "airflow_cpu_percent_of_one_core": round(100 * airflow / elapsed, 2),
    }


def memory(pid: int) -> dict[str, Any]:
    """
    Memory of a process tree, in MB: RSS summed over its processes, and PSS and USS (``smaps``).

    RSS counts a page shared by a parent and its forked child in both; PSS splits it between them, so
    the PSS total is what the tree really holds. Each process is listed with its command's first words.
    """
    root = psutil.Process(pid)
    members, total = [], {"rss": 0, "pss": 0, "uss": 0}
    for member in [root, *root.children(recursive=True)]:
        try:
            info = member.memory_full_info()
            command = " ".join(member.cmdline()[:4])[:80]
        except psutil.NoSuchProcess:
            continue
        sizes = {"rss": info.rss, "pss": info.pss, "uss": info.uss}
        for key, value in sizes.items():
            total[key] += value
        members.append({"command": command, **{f"{k}_mb": round(v / 2**20, 1) for k, v in sizes.items()}})
    return {**{f"{k}_mb": round(v / 2**20, 1) for k, v in total.items()}, "processes": members}
