"""Metrics and OpenLineage through real Airflow: ``airflow dags test`` of a tier DAG on the embedded broker.

Airflow's own ``[metrics]`` settings send StatsD (with InfluxDB-style tags) to a UDP socket this test
listens on; the OpenLineage provider writes its events with its file transport. The metric names,
tags and values must match the run summaries in XCom; the lineage events' datasets and counts too.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db

from tests.integration.test_reprocess_operator_dag import _states
from tests.integration.test_spark_operator_dag import SECRET, _airflow_env, _xcom
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).parents[2]
PARTITIONS = 2
COUNT = 42
DAG_ID = "akr_observed"

DAG_FILE = '''
"""Written by tests/integration/test_observability_dag.py."""
from datetime import datetime

from airflow.sdk import DAG

from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator
from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor

TOPOLOGY = {topology!r}
# a manual run's logical date is before anything was routed
NOW = "{{{{ macros.time.time_ns() // 1000000 }}}}"

with DAG({dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    main_tier = ReprocessTierOperator(task_id="reprocess_main", topology=TOPOLOGY, tier=0,
                                      handler="tests.support.ledger_handler:indexed",
                                      value_deserializer="tests.support.ledger_handler:decode",
                                      options={{"batch_size": 4}})
    tier_1_due = RetryTierDueSensor(task_id="tier_1_due", topology=TOPOLOGY, tier=1, deferrable=False,
                                    poke_interval=1, timeout=120)
    first_tier = ReprocessTierOperator(task_id="reprocess_tier_1", topology=TOPOLOGY, tier=1, cutoff=NOW,
                                       handler="tests.support.ledger_handler:indexed",
                                       value_deserializer="tests.support.ledger_handler:decode")
    watch = DltWatchOperator(task_id="watch_dlt", topology=TOPOLOGY)
    replay = ReplayDltOperator(task_id="replay_dlt", topology=TOPOLOGY, exception="{fatal}")
    main_tier >> tier_1_due >> first_tier >> watch >> replay
'''


class StatsdListener:
    """A UDP socket on 127.0.0.1 collecting StatsD lines, read in a thread until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def close(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.lines


def parse_statsd(
    lines: list[str], prefix: str = "airflow.kafka_retry."
) -> dict[tuple, list[tuple[str, float]]]:
    """``(name, sorted tags) -> [(type, value), ...]`` of this provider's metrics (InfluxDB-style tags)."""
    found: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
    for line in lines:
        if not line.startswith(prefix):
            continue
        head, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        name, *tags = head.split(",")
        found[(name[len("airflow.") :], tuple(sorted(tuple(t.split("=", 1)) for t in tags)))].append(
            (kind, float(value))
        )
    return found


def counter(metrics: dict, name: str, **tags: str) -> float:
    values = metrics.get((name, tuple(sorted(tags.items()))), [])
    assert values, f"no counter {name} {tags}: {sorted(metrics)}"
    assert all(kind == "c" for kind, _ in values), f"no counter {name} {tags}: {sorted(metrics)}"
    return sum(v for _, v in values)


def single(metrics: dict, name: str, kind: str, **tags: str) -> float:
    values = metrics.get((name, tuple(sorted(tags.items()))), [])
    assert [k for k, _ in values] == [kind], f"{name} {tags}: {values}"
    return values[0][1]


def lineage_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def completed(events: list[dict], task_id: str) -> dict:
    [event] = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.{task_id}"
    ]
    return event


def statistics(datasets: list[dict], facet: str) -> dict[str, int | None]:
    return {
        d["name"]: (d.get(facet) or {})
        .get(f"{'input' if facet == 'inputFacets' else 'output'}Statistics", {})
        .get("rowCount")
        for d in datasets
    }


def _tests_only_path(tmp_path: Path) -> Path:
    folder = tmp_path / "pythonpath"
    folder.mkdir()
    (folder / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    return folder


@pytest.fixture(scope="module")
def observed_run(kafka_bootstrap, tmp_path_factory):
    """One ``airflow dags test`` of the DAG above, with metrics and lineage on; both tests read it."""
    tmp_path = tmp_path_factory.mktemp("observed")
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("obs"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    env = _airflow_env(tmp_path, kafka_bootstrap, ledger_file)
    listener = StatsdListener()
    lineage_file = tmp_path / "openlineage.jsonl"
    env.update(
        {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(listener.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(lineage_file), "append": True}
            ),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "akr-test",
            # default 10 s: too short on a busy 2-core machine
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "120",
            # the test handler's package without the repository itself: its airflow_kafka_retry.egg-info (left
            # by the editable install) would list this provider's plugin entry point twice, and Airflow 3.3's
            # task-side plugin loader stops at a duplicate name, dropping the OpenLineage listener that comes
            # after it
            "PYTHONPATH": str(_tests_only_path(tmp_path)),
        }
    )
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{DAG_ID}.py"
    dag_file.write_text(
        textwrap.dedent(
            DAG_FILE.format(
                topology=str(tmp_path / "topology.yaml"),
                dag_id=DAG_ID,
                fatal=f"{ledger.HANDLER_MODULE}.InvalidOrder",
            )
        )
    )
    try:
        seed_metadata_db(env, cwd=REPO)
        run = subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "dags", "test", DAG_ID],
            check=False,
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        lines = listener.close()
    output = run.stdout + run.stderr
    (tmp_path / "airflow-output.txt").write_text(output)
    assert _states(env, DAG_ID) == dict.fromkeys(
        ["reprocess_main", "tier_1_due", "reprocess_tier_1", "watch_dlt", "replay_dlt"], "success"
    ), output[-5000:]
    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    xcom = {
        task: _xcom(db, DAG_ID, task, "return_value")[0]
        for task in ("reprocess_main", "tier_1_due", "reprocess_tier_1", "watch_dlt", "replay_dlt")
    }
    return {
        "topology": topology,
        "inputs": inputs,
        "metrics": parse_statsd(lines),
        "xcom": xcom,
        "lineage": lineage_events(lineage_file) if lineage_file.exists() else [],
        "output": output,
        "server": kafka_bootstrap.split(",")[0],
    }


def test_metrics_and_lineage_of_a_tier_dag_match_its_run_summaries(observed_run):
    topology, metrics, xcom = observed_run["topology"], observed_run["metrics"], observed_run["xcom"]
    tier1, dlt, _parking = topology.tier(1).topic, topology.dlt_topic, topology.parking_topic
    main = xcom["reprocess_main"]
    totals = main["totals"]
    modes = Counter(mode for mode, _, _ in observed_run["inputs"].records.values())
    assert totals["drained"] == COUNT
    assert totals["dlt_topics"] == {dlt: modes["fatal"] + modes["bad-json"]}

    # ---- counters of the main tier's run: the run summary's figures, tagged with path, tier topic and index
    tags = {"topology": topology.topic, "tier_topic": topology.topic, "tier": "0"}
    assert counter(metrics, "kafka_retry.tier.runs", status="ok", **tags) == 1
    assert counter(metrics, "kafka_retry.tier.drained", **tags) == COUNT
    assert counter(metrics, "kafka_retry.tier.succeeded", **tags) == totals["succeeded"] == modes["ok"]
    assert counter(metrics, "kafka_retry.tier.routed", **tags) == totals["routed"][tier1]
    assert (
        counter(metrics, "kafka_retry.tier.dead_lettered", dlt_topic=dlt, **tags) == totals["dlt_topics"][dlt]
    )
    assert counter(metrics, "kafka_retry.tier.parked", **tags) == 0
    assert counter(metrics, "kafka_retry.tier.dropped", **tags) == totals["dropped"] == 0
    assert counter(metrics, "kafka_retry.tier.handler_errors", **tags) == COUNT - modes["ok"]
    assert (
        counter(metrics, "kafka_retry.tier.bisection_calls", **tags)
        == sum(p["extra_handler_calls"] for p in main["partitions"])
        > 0
    )
    assert counter(metrics, "kafka_retry.tier.handler_calls", **tags) == sum(
        p["handler_calls"] for p in main["partitions"]
    )
    assert (
        single(metrics, "kafka_retry.tier.run_duration", "ms", **tags)
        == main["finished_ms"] - main["started_ms"]
    )
    handler = main["handler_ms"]
    assert handler["count"] == counter(metrics, "kafka_retry.tier.handler_calls", **tags)
    assert (
        counter(metrics, "kafka_retry.tier.handler_batch_time_bucket", le="inf", **tags) == handler["count"]
    )
    assert single(metrics, "kafka_retry.tier.handler_batch_time_max", "ms", **tags) == handler["max_ms"]
    # main-topic records carry no due time: no lateness for that run
    assert not [k for k in metrics if k[0].startswith("kafka_retry.tier.lateness") and ("tier", "0") in k[1]]

    # ---- the backlog gauges of tier 1, from the sensor's peek (its XCom holds what it saw)
    due = xcom["tier_1_due"]
    tier1_tags = {"topology": topology.topic, "tier_topic": tier1, "tier": "1"}
    # log end - head: the records, plus the commit marker each of the main run's transactions left (an upper
    # bound)
    backlog = single(metrics, "kafka_retry.tier.backlog", "g", **tier1_tags)
    markers = sum(p["transactions"] for p in main["partitions"])
    assert totals["routed"][tier1] <= backlog <= totals["routed"][tier1] + markers, (backlog, markers)
    oldest_due = min(h["due_ms"] for h in due["heads"])
    assert (
        single(metrics, "kafka_retry.tier.oldest_due_age_ms", "g", **tier1_tags)
        == due["checked_at_ms"] - oldest_due
        > 0
    )

    # ---- tier 1: every record had a due time, so each one's lateness is in the distribution
    first = xcom["reprocess_tier_1"]
    assert first["lateness_ms"]["count"] == first["totals"]["drained"] == totals["routed"][tier1]
    assert (
        counter(metrics, "kafka_retry.tier.lateness_bucket", le="inf", **tier1_tags)
        == first["totals"]["drained"]
    )
    assert (
        single(metrics, "kafka_retry.tier.lateness_max", "ms", **tier1_tags) == first["lateness_ms"]["max_ms"]
    )
    assert single(metrics, "kafka_retry.tier.lateness", "ms", **tier1_tags) == pytest.approx(
        first["lateness_ms"]["sum_ms"] / first["lateness_ms"]["count"], abs=0.001
    )

    # ---- the DLT watch: new dead letters per DLT and exception class
    watched = xcom["watch_dlt"]["totals"]
    assert watched["new_records"] == totals["dlt_topics"][dlt]
    for exception, n in watched["dead_lettered"].items():
        assert (
            counter(
                metrics,
                "kafka_retry.dlt.new_records",
                topology=topology.topic,
                dlt_topic=dlt,
                family="spring-retry-topic",  # the engine writes Spring's retry-topic headers
                exception=exception,
            )
            == n
        )

    # ---- nothing names a partition, an offset or a key
    tag_names = {name for _, tag_set in metrics for name, _ in tag_set}
    assert tag_names == {"topology", "tier_topic", "tier", "status", "dlt_topic", "family", "exception", "le"}


def test_openlineage_events_name_kafka_topics_with_counts(observed_run):
    topology, xcom, events = observed_run["topology"], observed_run["xcom"], observed_run["lineage"]
    assert events, "the OpenLineage provider wrote no event: " + observed_run["output"][-3000:]
    namespace = f"kafka://{observed_run['server']}"
    tier1, dlt, parking = topology.tier(1).topic, topology.dlt_topic, topology.parking_topic
    totals = xcom["reprocess_main"]["totals"]

    main = completed(events, "reprocess_main")
    assert {d["namespace"] for d in main["inputs"] + main["outputs"]} == {namespace}
    assert statistics(main["inputs"], "inputFacets") == {topology.topic: COUNT}
    destinations = {t: totals["routed"].get(t, 0) for t in topology.destinations_from(topology.tier(0))}
    assert statistics(main["outputs"], "outputFacets") == destinations
    assert set(destinations) == {tier1, dlt, parking}
    facet = main["run"]["facets"]["kafkaRetry"]
    assert (facet["kind"], facet["status"], facet["tier"], facet["topic"]) == (
        "tier_run",
        "ok",
        0,
        topology.topic,
    )
    assert facet["totals"] == totals

    first = completed(events, "reprocess_tier_1")
    assert statistics(first["inputs"], "inputFacets") == {
        tier1: xcom["reprocess_tier_1"]["totals"]["drained"]
    }

    started = [
        e for e in events if e["eventType"] == "START" and e["job"]["name"] == f"{DAG_ID}.reprocess_main"
    ]
    assert [d["name"] for d in started[0]["inputs"]] == [topology.topic]

    watch = completed(events, "watch_dlt")
    assert statistics(watch["inputs"], "inputFacets") == {dlt: xcom["watch_dlt"]["totals"]["new_records"]}
    assert watch["run"]["facets"]["kafkaRetry"]["totals"] == xcom["watch_dlt"]["totals"]

    replay = completed(events, "replay_dlt")
    moved = xcom["replay_dlt"]
    assert moved["moved"] > 0
    assert moved["targets"] == {topology.topic: moved["moved"]}
    assert statistics(replay["inputs"], "inputFacets") == {dlt: moved["scanned"]}
    assert statistics(replay["outputs"], "outputFacets") == {topology.topic: moved["moved"]}

    # counts and topic names only: no payload, no connection secret
    text = json.dumps(events)
    assert SECRET not in text
    assert "sasl.password" not in text
    assert "bootstrap.servers" not in text
    assert '"mode"' not in text, "a record payload reached a lineage event"
