"""
The read-only roles on the secured broker (issue 48) with one ACL less: refused naming what is missing.

The watcher (the topology watcher's lanes: a head watch per tier and one on the DLT, each opened as the
trigger opens it) and the view (the Retry tiers view's reads, ``plugin/scans.read_topology``, and a DLT
page's: its redrives' status and a dry run, ``plugin/dlt_reads.py``), each run as its role's principal
holding every binding of its row but one: every lane or topic that needs the missing binding reports an
error naming the principal, the operation and the resource, within the call deadline. Kafka answers a
group the principal may not describe only with a timeout; the error names it all the same. Nothing is
written: one topology and its records serve every case (module scope), each case has its own users, so a
binding granted in one never helps another. With every binding of its row, the view reads a DLT page and
may not write a replay log (a DLT page's Stop writes as the replay role).
"""

from __future__ import annotations

import functools
import time

import pytest
from confluent_kafka import KafkaError, Producer

from airflow_kafka_retry.dlt.replay_request import ReplayRequest
from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.operators.dlt_watch import watched_topics
from airflow_kafka_retry.plugin import dlt_reads
from airflow_kafka_retry.plugin.scans import read_topology
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.policy.client_names import replay_log_name, watch_group
from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import create_topics

from tests.support import ledger
from tests.support.secure_fixtures import RoleUsers

pytestmark = [pytest.mark.integration]

PARTITIONS = 2
SCOPE = AclScope(include_main=True)
#: the watcher's calls end within their client timeouts (15 s committed offsets, 5 s naming the ACL) and the
#: trigger abandons one at 60 s (``triggers/broker_calls.py``); the view's within its timeout (5 s here)
LIVENESS_S = 60


def _topology(topic: str) -> Topology:
    return Topology.from_mapping({"topic": topic, "group_id": f"{topic}-svc", "attempts": 3})


@pytest.fixture(scope="module")
def readers_topology(secure_kafka) -> Topology:
    """Every topic of the path, a record in each (as the super user): read by every case, never moved."""
    topology = _topology(ledger.unique_topic("readless"))
    internal = f"127.0.0.1:{secure_kafka.port}"
    topics = [t.topic for t in (*topology.tiers, *topology.dlt_tiers)] + [topology.parking_topic]
    create_topics(internal, topics, PARTITIONS)
    producer = Producer({"bootstrap.servers": internal})
    for topic in topics:
        producer.produce(topic, b"{}", key=b"k", partition=0)
    assert producer.flush(15) == 0
    return topology


def _cases() -> list:
    topology = _topology("t")
    return [
        pytest.param(role, i, id=f"{role}-{b.operation}-{b.resource_type}-{b.name}")
        for role in ("watcher", "view")
        for i, b in enumerate(acl_bindings(topology, SCOPE, roles=[role]))
    ]


def _lanes(topology: Topology) -> list[tuple[list[str], str, bool, list[str]]]:
    """The watcher's lanes as the factory builds them: (topics, group, read_due, optional topics)."""
    tiers = [([t.topic], topology.consumer_group(t), True, []) for t in topology.tiers]
    dead, optional = watched_topics(topology)  # the DLT lane: the DLTs, and the parking topic once it exists
    return [*tiers, (dead, watch_group(topology.group_id), False, optional)]


def _watcher_errors(topology: Topology, config: dict) -> list[str]:
    errors = []
    for topics, group, read_due, optional in _lanes(topology):
        try:
            watch = HeadWatch(config, topics, group, read_due=read_due, optional=optional)
            try:
                watch.sync_committed()
            finally:
                watch.close()
        except Exception as exc:  # the lane's error, as the trigger logs it
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def _view_errors(topology: Topology, config: dict) -> list[str]:
    settings = ViewSettings(
        topologies=(),
        kafka_conn_id="unused",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=5.0,
        runs=1,
    )
    scan = read_topology(topology, settings, config, now_ms=int(time.time() * 1000))
    answers = [*scan.backlog.values(), *scan.dead.values()]
    return [str(a["error"]) for a in answers if a.get("error")] + _dlt_page_errors(topology, config)


def _dlt_page_errors(topology: Topology, config: dict) -> list[str]:
    """A DLT page's reads of the DLT and of the parking topic: its redrives' status, a dry run to main."""
    errors = []
    for source in [t.topic for t in topology.dlt_tiers] + [topology.parking_topic]:
        for read in (
            functools.partial(dlt_reads.statuses, config, topology, source),
            functools.partial(
                dlt_reads.dry_run, config, topology, ReplayRequest(dlt=source, to="main"), targets=["main"]
            ),
        ):
            try:
                read()
            except Exception as exc:  # as the endpoint answers it
                errors.append(f"{type(exc).__name__}: {exc}")
    return errors


@pytest.mark.parametrize(("role", "index"), _cases())
def test_one_acl_less_refuses_a_reader_naming_it(secure_kafka, readers_topology, role, index):
    needed = acl_bindings(readers_topology, SCOPE, roles=[role])
    missing = needed[index]
    users = RoleUsers(secure_kafka, [role])
    users.grant([b for b in needed if b != missing])
    started = time.monotonic()
    errors = (_watcher_errors if role == "watcher" else _view_errors)(readers_topology, users.config(role))
    took = time.monotonic() - started
    assert errors, f"every read passed without {missing}"
    text = "\n".join(errors)
    for named in (users.principals[role], f"{missing.operation} on {missing.resource()}"):
        assert named in text, text
    assert "do not exist" not in text, text
    assert took < LIVENESS_S, f"refused after {took:.0f} s"


def test_the_view_reads_a_dlt_page_and_may_not_write_a_replay_log(secure_kafka, readers_topology):
    users = RoleUsers(secure_kafka, ["view"])
    users.grant(acl_bindings(readers_topology, SCOPE, roles=["view"]))
    config = users.config("view")
    assert _dlt_page_errors(readers_topology, config) == []
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _message: object) -> None:
        failures.append(err)

    # not idempotent: the principal's first refusal is then the topic's, not the producer id's (the cluster's)
    producer = Producer({**config, "enable.idempotence": False, "message.timeout.ms": 15_000})
    log = replay_log_name(readers_topology.dlt_tiers[0].topic)
    producer.produce(log, key=b"stop/r1", value=b"{}", on_delivery=delivered)
    assert producer.flush(20) == 0
    assert [e.code() for e in failures if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], failures
