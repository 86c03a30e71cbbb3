"""
The set-up the factory DAG tests share: their topology file and their DAG file.

``test_factory_dag.py`` (schedule mode), ``test_factory_dag_events.py`` (the topology DAG) and
``test_factory_dag_roles.py`` (a connection per role) each write the same three-attempt topology (retry
tiers of 1 s and 2 h, ``InvalidOrder`` not retryable) and a DAG file calling ``build_retry_dags`` with the
ledger handler and the recording notifier (only the DAG file's further arguments differ), and run
it under an Airflow whose environment names the ledger and the notifier's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import airflow_env
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support.ledger import HANDLER_MODULE

REPO = Path(__file__).parents[2]

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

_DAG_FILE = '''"""Written by {writer}."""
import datetime

from airflow_kafka_retry import build_retry_dags
from tests.support.timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="{handler}:indexed",
    value_deserializer="{handler}:decode",
    on_dlt=[record_notification],
    dag_id_template="akr_{{topic}}",
    default_args={{"retries": 0}},
{arguments}))
'''


def write_topology(folder: Path, prefix: str) -> tuple[Path, Topology]:
    """``folder/topology.yaml`` for a fresh main topic named after ``prefix``, and the topology it loads."""
    main = unique_topic(prefix)
    path = folder / "topology.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topic": main,
                "group_id": f"{main}-svc",
                "attempts": 3,
                "backoff": {"kind": "custom", "delays": ["1s", "2h"]},
                "not_retryable": [f"{HANDLER_MODULE}.InvalidOrder"],
            }
        )
    )
    return path, load_topology(path)


def write_dag_file(dags: Path, name: str, *, writer: str, topology_file: Path, **arguments: Any) -> Path:
    """
    ``dags/name``: a DAG file of ``build_retry_dags`` over ``topology_file``, plus ``arguments``.

    Each further argument is written as its ``repr`` (a ``timedelta`` too: the file imports ``datetime``).
    """
    dags.mkdir(parents=True, exist_ok=True)
    path = dags / name
    path.write_text(
        _DAG_FILE.format(
            writer=writer,
            topology=str(topology_file),
            handler=HANDLER_MODULE,
            arguments="".join(f"    {key}={value!r},\n" for key, value in arguments.items()),
        )
    )
    return path


def kafka_connection(bootstrap: str, **extra: str) -> dict[str, Any]:
    """An Airflow connection of type ``kafka`` to ``bootstrap``, with ``extra`` librdkafka settings."""
    return {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, **extra}}


def dags_test_env(home: Path, folder: Path, connections: dict[str, dict[str, Any]]) -> dict[str, str]:
    """
    The environment of the Airflow under ``home`` that runs the DAG file: ``connections``, the repository
    on the path, the handler's ledger ``folder/ledger.txt`` and the notifier's log ``folder/notified.jsonl``.
    """
    return airflow_env(
        home,
        connections=connections,
        extra={"AKR_LEDGER": str(folder / "ledger.txt"), "AKR_NOTIFY_LOG": str(folder / "notified.jsonl")},
        pythonpath=[REPO],
    )
