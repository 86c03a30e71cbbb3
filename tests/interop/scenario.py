"""Pieces shared by the Spring interop scenarios: the topology, the records, the broker views, Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import airflow_env, seed_metadata_db

from tests.support.warm_airflow import run_airflow

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

REPO = Path(__file__).parents[2]
HANDLER = "tests.interop.orders_handler"
#: order kinds and how many of each a scenario produces
KINDS = {"ok": 3, "transient:1": 3, "transient:2": 3, "transient:3": 2, "invalid": 2, "poison": 3}
PARTITIONS = 2


def write_topology(path: Path, topic: str, group: str) -> Topology:
    """The README's example (the service's @RetryableTopic) for ``topic``, under ``compat: spring-3.2``."""
    path.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
                "group_id": group,
                "compat": "spring-3.2",
                "attempts": 4,
                "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2.0, "max": "10s"},
                "dlt_routing": {"-validation": [f"{HANDLER}.InvalidOrder"]},
            }
        )
    )
    return load_topology(path)


def produce_orders(bootstrap: str, topic: str, kinds: dict[str, int] = KINDS) -> dict[str, str]:
    """Orders spread over the partitions, in order: id -> kind."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    orders = {}
    n = 0
    for kind, count in kinds.items():
        for _ in range(count):
            rid = f"o{n}"
            orders[rid] = kind
            producer.produce(topic, key=rid.encode(), value=kind.encode(), partition=n % PARTITIONS)
            n += 1
    assert producer.flush(30) == 0
    return orders


def broker_topics(bootstrap: str, prefix: str) -> dict[str, int]:
    """Topics on the broker named ``prefix`` or ``prefix-...``: name -> partition count."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {
        name: len(t.partitions)
        for name, t in metadata.topics.items()
        if name == prefix or name.startswith(prefix + "-")
    }


def broker_groups(bootstrap: str, prefix: str, expected: int) -> set[str]:
    """Consumer groups named ``prefix`` or ``prefix-...`` (asked again while fewer than ``expected``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found: set[str] = set()
    for _ in range(30):
        listed = admin.list_consumer_groups(request_timeout=15).result()
        found = {
            g.group_id for g in listed.valid if g.group_id == prefix or g.group_id.startswith(prefix + "-")
        }
        if len(found) >= expected and not listed.errors:
            break
        time.sleep(1)
    return found


def spring_names(topology: Topology) -> tuple[set[str], set[str]]:
    """The topics and groups ``topology show`` says Spring uses (the parking topic is the provider's own)."""
    shown = subprocess.run(
        [sys.executable, "-m", "airflow_kafka_retry.cli", "topology", "show", str(topology.source)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    show = json.loads(shown.stdout)
    topics = {t["topic"] for t in show["tiers"]} | set(show["dlt_topics"])
    groups = {t["consumer_group"] for t in show["tiers"]} | set(show["dlt_consumer_groups"].values())
    return topics, groups


def without_preset(topology: Topology, path: Path) -> Path:
    """``topology``'s file with ``compat: none`` instead of its preset, written to ``path``."""
    data = yaml.safe_load(Path(topology.source).read_text())
    path.write_text(yaml.safe_dump({**data, "compat": "none"}))
    return path


def show_with_broker(path: Path, bootstrap: str) -> subprocess.CompletedProcess:
    """``airflow-kafka-retry topology show FILE --bootstrap ...`` (checks the broker's topics)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "topology",
            "show",
            str(path),
            "--bootstrap",
            bootstrap,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def read_ledger(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def homes(spring_events: list[dict], python_ledger: list[dict]) -> dict[str, list[str]]:
    """Where each order ended: ``spring:<topic>`` / ``airflow:<topic>`` (processed) or ``dlt:<topic>``."""
    where: dict[str, list[str]] = {}
    for e in spring_events:
        if e["event"] == "processed":
            where.setdefault(e["id"], []).append(f"spring:{e['topic']}")
        elif e["event"] == "dlt":
            where.setdefault(e["id"], []).append(f"dlt:{e['topic']}")
    for e in python_ledger:
        where.setdefault(e["id"], []).append(f"airflow:{e['topic']}")
    return where


def count_kinds(orders: dict[str, str]) -> Counter:
    return Counter(orders.values())


DAG_FILE = '''
"""Written by tests/interop: the factory DAGs of the Spring service's topology."""
from airflow_kafka_retry import build_retry_dags

globals().update(build_retry_dags(
    {topology!r},
    handler="{handler}:handle",
    value_deserializer="{handler}:decode",
    dag_id_template="akr_{{topic}}",
    default_args={{"retries": 0}},
    dlt_watch=False,
    trigger="schedule",
))
'''


class AirflowDags:
    """The factory DAGs in an own AIRFLOW_HOME (SQLite), run with ``airflow dags test``.

    The metadata DB is a copy of the worker's migrated template (``seed_metadata_db``: one ``airflow db
    migrate`` per test process, shared with every other test file there that seeds one).
    """

    def __init__(
        self,
        home: Path,
        topology: Topology,
        bootstrap: str,
        ledger: Path,
    ) -> None:
        self.home = home
        self.env = airflow_env(
            home,
            connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
            extra={"AKR_LEDGER": str(ledger)},
            pythonpath=[REPO],
        )
        (home / "dags" / "akr_spring.py").write_text(
            textwrap.dedent(DAG_FILE.format(topology=str(topology.source), handler=HANDLER))
        )
        seed_metadata_db(self.env, cwd=REPO)
        done = self.cli("dags", "reserialize")
        assert done.returncode == 0, done.stderr[-3000:]

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return run_airflow(self.env, *args, timeout=timeout)

    def test_dag(self, topic: str) -> str:
        """``airflow dags test akr_<topic>``; fails unless every task of the run succeeded."""
        run = self.cli("dags", "test", f"akr_{topic}")
        output = run.stdout + run.stderr
        (self.home / f"dags-test-{topic}.txt").write_text(output)
        assert run.returncode == 0, output[-5000:]
        states = self.states(f"akr_{topic}")
        assert states, output[-5000:]
        assert set(states[-1].values()) == {"success"}, (states, output[-5000:])
        return output

    def states(self, dag_id: str) -> list[dict[str, str]]:
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(self.home / "airflow.db")) as con:
            rows = con.execute(
                "SELECT ti.run_id, ti.task_id, ti.state FROM task_instance ti JOIN dag_run dr "
                "ON dr.run_id = ti.run_id AND dr.dag_id = ti.dag_id WHERE ti.dag_id = ? ORDER BY dr.id",
                (dag_id,),
            ).fetchall()
        runs: dict[str, dict[str, str]] = {}
        for run_id, task_id, state in rows:
            runs.setdefault(run_id, {})[task_id] = state
        return list(runs.values())


def drain_tier(topology: Topology, tier: str, bootstrap: str, ledger: Path) -> dict:
    """One drain of ``tier`` by the provider's CLI (the local engine in its own process)."""
    import os

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_kafka_retry.cli",
            "drain",
            "--topology",
            str(topology.source),
            "--tier",
            tier,
            "--handler",
            f"{HANDLER}:handle",
            "--value-deserializer",
            f"{HANDLER}:decode",
            "--bootstrap",
            bootstrap,
        ],
        env={**os.environ, "AKR_LEDGER": str(ledger), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def read_records(bootstrap: str, topic: str) -> list:
    """Every record of ``topic`` (confluent_kafka messages)."""
    from tests.support.ledger import read_all

    return read_all(bootstrap, topic)


def read_records_once_there(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list:
    """Every record of ``topic`` once it holds at least ``count`` (or at ``timeout``: the check that follows
    names what is missing). Spring reports a record's last failure before its recoverer publishes it."""
    deadline = time.monotonic() + timeout
    while len(records := read_records(bootstrap, topic)) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return records
