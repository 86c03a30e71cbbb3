"""Pure parts of observability: the bounded distribution, the metrics a run/peek/watch makes, the lineage
facets.

Sending (Airflow's Stats over a real UDP socket) and the OpenLineage provider's events are tested
through ``airflow dags test`` in tests/integration/test_observability_dag.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kafka_retry.engine.drain.distribution import BUCKET_LABELS, Distribution
from airflow_kafka_retry.engine.drain.summary import DeadLetter, PartitionSummary, RunSummary
from airflow_kafka_retry.engine.heads.peek import PartitionHead, TierPeek
from airflow_kafka_retry.observability.lineage import lineage_server, replay_lineage, tier_run_lineage
from airflow_kafka_retry.observability.metrics import (
    OTHER,
    backlog_metrics,
    dlt_watch_metrics,
    exception_tags,
    run_metrics,
    sanitize_tag,
)
from airflow_kafka_retry.policy.topology.file import load_topology

TOPOLOGY = load_topology(str(Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"))


# ----------------------------------------------------------------------------- distribution
def test_distribution_counts_sums_and_buckets_and_merges_across_partitions():
    a, b = Distribution(), Distribution()
    for ms in (5, 10, 11, 999):
        a.add(ms)
    for ms in (-3, 4_000_000):  # a clock a little behind counts as 0; past the last bound: inf
        b.add(ms)
    merged = Distribution.merged([a, b])
    assert (merged.count, merged.sum_ms, merged.max_ms) == (6, 4_001_025, 4_000_000)
    cumulative = merged.cumulative()
    assert list(cumulative) == list(BUCKET_LABELS)
    assert cumulative["10"] == 3
    assert cumulative["100"] == 4
    assert cumulative["1000"] == 5
    assert cumulative["3600000"] == 5
    assert cumulative["inf"] == 6
    assert (a.count, b.count) == (4, 2), "merged() must not change its parts"


def test_distribution_survives_json_and_old_documents_without_one():
    d = Distribution()
    d.add(42)
    assert Distribution.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert Distribution.from_dict(None) == Distribution()
    with pytest.raises(ValueError, match="buckets"):
        Distribution.from_dict({"count": 1, "sum_ms": 1, "max_ms": 1, "buckets": [1]})


def test_partition_summaries_carry_lateness_and_handler_time_through_the_spark_result_document():
    p = PartitionSummary("orders-retry-1", 0, "g", drained=2, succeeded=2)
    p.lateness_ms.add(1_500)
    p.handler_ms.add(7)
    q = PartitionSummary("orders-retry-1", 1, "g", drained=1, succeeded=1)
    q.lateness_ms.add(90_000)
    run = RunSummary("orders.yaml", 1, "orders-retry-1", "g", "spark", 0, 0, 1, [p, q])
    again = RunSummary.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again.to_dict() == run.to_dict()
    assert again.lateness().count == 2
    assert again.lateness().max_ms == 90_000
    assert again.to_dict()["lateness_ms"]["sum_ms"] == 91_500
    assert again.handler_time().count == 1
    old = {k: v for k, v in p.to_dict().items() if k not in ("lateness_ms", "handler_ms")}
    assert PartitionSummary.from_dict(old).lateness_ms == Distribution()


# ----------------------------------------------------------------------------- run metrics
def _run() -> RunSummary:
    p = PartitionSummary(
        "orders-retry-1", 0, "g", drained=10, succeeded=5, handler_calls=4, extra_handler_calls=3
    )
    for topic, n in (
        ("orders-retry-2", 2),
        ("orders-dlt", 1),
        ("orders-validation-dlt", 1),
        ("orders-parking", 1),
    ):
        for i in range(n):
            p.count_route(topic)
            p.count_dead_letter(
                DeadLetter("orders-retry-1", 0, i, "a.B", "r", topic, 0, i), 100
            ) if topic != "orders-retry-2" else None
    p.lateness_ms.add(2_000)
    p.lateness_ms.add(4_000)
    p.handler_ms.add(30)
    return RunSummary("orders.yaml", 1, "orders-retry-1", "g", "local", 0, 1_000, 3_500, [p])


def _by_name(metrics):
    return {(m.name, tuple(sorted(m.tags.items()))): (m.kind, m.value) for m in metrics}


def _tags(base, **more):
    return tuple(sorted((*base, *more.items())))


def test_run_metrics_split_routed_records_into_next_tier_dlts_and_parking():
    base = (("tier", "1"), ("tier_topic", "orders-retry-1"), ("topology", "orders"))
    got = _by_name(run_metrics(_run(), TOPOLOGY))
    assert got[("kafka_retry.tier.drained", base)] == ("counter", 10)
    assert got[("kafka_retry.tier.succeeded", base)] == ("counter", 5)
    assert got[("kafka_retry.tier.routed", base)] == ("counter", 2)
    assert got[("kafka_retry.tier.parked", base)] == ("counter", 1)
    assert got[("kafka_retry.tier.handler_errors", base)] == ("counter", 5)
    assert got[("kafka_retry.tier.bisection_calls", base)] == ("counter", 3)
    assert got[("kafka_retry.tier.dropped", base)] == ("counter", 0)
    assert got[("kafka_retry.tier.dead_lettered", _tags(base, dlt_topic="orders-dlt"))] == ("counter", 1)
    assert got[("kafka_retry.tier.dead_lettered", _tags(base, dlt_topic="orders-validation-dlt"))] == (
        "counter",
        1,
    )
    assert got[("kafka_retry.tier.run_duration", base)] == ("timer", 2_500)
    assert got[("kafka_retry.tier.lateness", base)] == ("timer", 3_000)
    assert got[("kafka_retry.tier.lateness_max", base)] == ("timer", 4_000)
    assert got[("kafka_retry.tier.lateness_bucket", _tags(base, le="10000"))] == ("counter", 2)
    assert got[("kafka_retry.tier.lateness_bucket", _tags(base, le="1000"))] == ("counter", 0)
    assert got[("kafka_retry.tier.handler_batch_time", base)] == ("timer", 30)


def test_metric_tags_never_name_a_partition_offset_or_key():
    metrics = run_metrics(_run(), TOPOLOGY)
    tag_names = {k for m in metrics for k in m.tags}
    assert tag_names <= {"topology", "tier_topic", "tier", "dlt_topic", "status", "le"}
    assert all(m.name.startswith("kafka_retry.") for m in metrics)


#: what a metric may be tagged with: the path, the tier, the DLT, the run's status, a bucket's bound and (the
#: DLT watch) the exception class. Never a partition, an offset or a key: each would make a series per record.
TAG_NAMES = {"topology", "tier_topic", "tier", "dlt_topic", "status", "le", "exception", "family"}


class _DltMessage:
    """What the DLT watch reads of a consumed record (a stand-in for confluent_kafka.Message)."""

    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def topic(self) -> str:
        return "orders-dlt"

    def partition(self) -> int:
        return 7

    def offset(self) -> int:
        return 987_655

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def key(self) -> bytes:
        return b"cust-4711"


def test_no_metric_function_tags_a_partition_offset_or_key():
    """Every metric function (run, backlog, peek gauges, DLT watch) on records at partition 7, offset 987654,
    key ``cust-4711``: the tags come from :data:`TAG_NAMES`, and no tag value carries a coordinate or the key;
    the DLT watch's ``exception`` tag is the class name, never the exception's message."""
    import struct

    from airflow_kafka_retry.engine.scans.dlt_scan import DltWatchSummary
    from airflow_kafka_retry.observability.metrics import peek_gauges
    from airflow_kafka_retry.policy.headers.codec import RETRY_TOPIC_NAMES as N

    p = PartitionSummary("orders-retry-1", 7, "g", drained=3, succeeded=1, handler_calls=3)
    for topic in ("orders-retry-2", "orders-dlt", "orders-parking"):
        p.count_route(topic)
    p.count_dead_letter(DeadLetter("orders-retry-1", 7, 987_654, "a.B", "r", "orders-dlt", 7, 987_655), 100)
    p.lateness_ms.add(2_000)
    p.handler_ms.add(30)
    run = RunSummary("orders.yaml", 1, "orders-retry-1", "g", "local", 0, 1_000, 3_500, [p])
    peek = TierPeek("orders-retry-1", "g", (7,), (PartitionHead(7, 987_654, 1_000, end_offset=987_660),))
    watch = DltWatchSummary(group="watch")
    watch.add(
        _DltMessage(
            [
                (N.original_topic, b"orders-retry-1"),
                (N.original_partition, struct.pack(">i", 7)),
                (N.original_offset, struct.pack(">q", 987_654)),
                (N.exception_fqcn, b"com.acme.PaymentDeclined"),
                (N.exception_message, b"card of cust-4711 declined at orders-retry-1-7@987654"),
            ]
        )
    )
    by_function = {
        "run_metrics": run_metrics(run, TOPOLOGY),
        "backlog_metrics": backlog_metrics(peek, TOPOLOGY, TOPOLOGY.tier(1), 5_000),
        "peek_gauges": peek_gauges(peek, "orders", 1, 5_000),
        "dlt_watch_metrics": dlt_watch_metrics(
            TOPOLOGY, watch.by_topic_family_exception, exception_tags(TOPOLOGY, watch.dead_lettered)
        ),
    }
    for function, metrics in by_function.items():
        assert metrics, function
        for m in metrics:
            assert m.name.startswith("kafka_retry."), (function, m)
            assert set(m.tags) <= TAG_NAMES, (function, m)
            for value in m.tags.values():
                assert "98765" not in value, (function, m)  # neither offset 987654 nor 987655
                assert "cust-4711" not in value, (function, m)
                assert value != "7", (function, m)
    [dlt] = by_function["dlt_watch_metrics"]
    assert dlt.tags == {
        "topology": "orders",
        "dlt_topic": "orders-dlt",
        "family": "spring-retry-topic",
        "exception": "com.acme.PaymentDeclined",
    }


def test_backlog_gauges_from_a_peek():
    now = 1_000_000
    peek = TierPeek(
        "orders-retry-2",
        "g",
        (0, 1, 2),
        (
            PartitionHead(0, 10, now - 700_000, end_offset=25),  # due 700 s ago, 15 records
            PartitionHead(1, 3, now + 5_000, end_offset=4),  # not due yet, 1 record
        ),
    )
    got = _by_name(backlog_metrics(peek, TOPOLOGY, TOPOLOGY.tier(2), now))
    tags = (("tier", "2"), ("tier_topic", "orders-retry-2"), ("topology", "orders"))
    assert got == {
        ("kafka_retry.tier.backlog", tags): ("gauge", 16),
        ("kafka_retry.tier.oldest_due_age_ms", tags): ("gauge", 700_000),
    }
    idle = TierPeek("orders-retry-2", "g", (0,), ())
    assert _by_name(backlog_metrics(idle, TOPOLOGY, TOPOLOGY.tier(2), now))[
        ("kafka_retry.tier.oldest_due_age_ms", tags)
    ] == ("gauge", 0)


def test_dlt_watch_metrics_per_dlt_and_exception():
    got = _by_name(
        dlt_watch_metrics(
            TOPOLOGY,
            {
                ("orders-dlt", "spring-retry-topic", "a.B"): 3,
                ("orders-validation-dlt", "spring-retry-topic", "c.D"): 1,
                ("connect-dlq", "kafka-connect", "c.D"): 2,
            },
            {"a.B": "a.B", "c.D": "c.D"},
        )
    )
    spring = ("family", "spring-retry-topic")
    assert got == {
        (
            "kafka_retry.dlt.new_records",
            (("dlt_topic", "orders-dlt"), ("exception", "a.B"), spring, ("topology", "orders")),
        ): ("counter", 3),
        (
            "kafka_retry.dlt.new_records",
            (("dlt_topic", "orders-validation-dlt"), ("exception", "c.D"), spring, ("topology", "orders")),
        ): ("counter", 1),
        (
            "kafka_retry.dlt.new_records",
            (
                ("dlt_topic", "connect-dlq"),
                ("exception", "c.D"),
                ("family", "kafka-connect"),
                ("topology", "orders"),
            ),
        ): ("counter", 2),
    }


def test_exception_tags_are_sanitized_and_capped_with_the_topologys_own_classes_always_kept():
    found = {"a,b=c|d\nx": 5, "com.acme.Z": 4, "com.acme.Y": 3, "com.acme.X": 1}
    found |= {name: 1 for name in TOPOLOGY.not_retryable}
    tags = exception_tags(TOPOLOGY, found, admitted={"com.acme.Old"}, cap=3)
    assert tags["a,b=c|d\nx"] == "a_b_c_d_x"
    assert tags["com.acme.Z"] == "com.acme.Z"
    assert tags["com.acme.Y"] == tags["com.acme.X"] == OTHER, tags  # the cap: Old, a_b_c_d_x, Z
    assert all(tags[name] == sanitize_tag(name) for name in TOPOLOGY.not_retryable)
    assert sanitize_tag("") == "unknown"
    assert len(sanitize_tag("x" * 500)) == 100


# ----------------------------------------------------------------------------- lineage
def test_lineage_server_is_the_first_bootstrap_host():
    assert lineage_server({"bootstrap.servers": "SASL_SSL://k1:9093, k2:9093"}) == "k1:9093"
    assert lineage_server({}) is None


def test_tier_run_lineage_names_kafka_datasets_and_counts_what_went_where():
    document = _run().to_dict()
    lineage = tier_run_lineage(TOPOLOGY, TOPOLOGY.tier(1), "k1:9092", document)
    [source] = lineage.inputs
    assert (source.namespace, source.name) == ("kafka://k1:9092", "orders-retry-1")
    assert source.inputFacets["inputStatistics"].rowCount == 10
    outputs = {o.name: o.outputFacets["outputStatistics"].rowCount for o in lineage.outputs}
    assert outputs == {"orders-retry-2": 2, "orders-dlt": 1, "orders-validation-dlt": 1, "orders-parking": 1}
    assert {o.namespace for o in lineage.outputs} == {"kafka://k1:9092"}
    facet = lineage.run_facets["kafkaRetry"]
    assert (facet.kind, facet.status, facet.tier, facet.totals) == ("tier_run", "ok", 1, document["totals"])
    started = tier_run_lineage(TOPOLOGY, TOPOLOGY.tier(1), "k1:9092")
    assert [o.name for o in started.outputs] == list(outputs)
    assert not started.run_facets
    assert all(not o.outputFacets for o in started.outputs)


def test_replay_lineage_outputs_only_what_moved():
    document = {
        "status": "ok",
        "dry_run": False,
        "scanned": 7,
        "matched": 5,
        "moved": 4,
        "selected": 4,
        "targets": {"orders": 3, "orders-retry-1": 1},
    }
    lineage = replay_lineage("orders-dlt", "k1:9092", document)
    assert [(i.name, i.inputFacets["inputStatistics"].rowCount) for i in lineage.inputs] == [
        ("orders-dlt", 7)
    ]
    assert {o.name: o.outputFacets["outputStatistics"].rowCount for o in lineage.outputs} == {
        "orders": 3,
        "orders-retry-1": 1,
    }
    assert lineage.run_facets["kafkaRetry"].totals["moved"] == 4
    assert replay_lineage("orders-dlt", "k1:9092", {**document, "dry_run": True}).outputs == []


# ----------------------------------------------------------------------------- the operators' OpenLineage
# methods
@pytest.mark.parametrize("cls", ["local", "spark"])
def test_both_reprocess_operators_report_lineage_with_the_run_counts(cls):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
    from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

    operator = {"local": ReprocessTierOperator, "spark": SparkReprocessTierOperator}[cls]
    op = operator(
        task_id="t",
        topology=TOPOLOGY.source,
        tier=1,
        handler="tests.support.ledger_handler:indexed",
        asset_server="k1:9092",
    )
    started = op.get_openlineage_facets_on_start()
    assert [i.name for i in started.inputs] == ["orders-retry-1"]
    assert not started.run_facets

    class TI:
        def xcom_push(self, key, value):
            pass

    run = _run()
    run.topology = TOPOLOGY.source
    op.report({"ti": TI(), "outlet_events": OutletEventAccessors()}, run, engine=cls)
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.inputs[0].inputFacets["inputStatistics"].rowCount == 10
    assert {o.name: o.outputFacets["outputStatistics"].rowCount for o in lineage.outputs}[
        "orders-retry-2"
    ] == 2
    assert lineage.run_facets["kafkaRetry"].totals == run.totals()


def test_the_operators_work_where_openlineage_is_not_installed():
    """With ``openlineage`` and the provider's modules unimportable (as when the extra is not installed), the
    operators import, build and report; only their get_openlineage_facets_* methods need it, and nothing calls
    them then."""
    import subprocess
    import sys

    code = f"""
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("airflow.providers.openlineage", "airflow.providers.openlineage.get_provider_info"):
            return None  # the installed distribution's metadata, which Airflow's provider discovery reads
        if name == "openlineage" or name.startswith(("openlineage.", "airflow.providers.openlineage.")):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
from airflow_kafka_retry.operators.replay_dlt import ReplayDltOperator
from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator
from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor
for cls in (ReprocessTierOperator, SparkReprocessTierOperator):
    cls(task_id="t", topology={TOPOLOGY.source!r}, tier=1, handler="m:f")
DltWatchOperator(task_id="w", topology={TOPOLOGY.source!r})
ReplayDltOperator(task_id="r", topology={TOPOLOGY.source!r})
RetryTierDueSensor(task_id="s", topology={TOPOLOGY.source!r}, tier=1)
print(sorted(m for m in sys.modules if m.startswith(("openlineage", "airflow.providers.openlineage."))
             and m != "airflow.providers.openlineage.get_provider_info"))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_any_airflow_process_sends_the_backlog_gauges_with_its_own_metrics_settings():
    """Like a triggerer calling emit_tier_backlog: a fresh Python process with [metrics] statsd_on sends the
    gauges (nothing of a task runner initialised Airflow's Stats there)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(30)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
        env.update(
            {
                "AIRFLOW__METRICS__STATSD_ON": "True",
                "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(sock.getsockname()[1]),
                "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            }
        )
        code = f"""
from airflow_kafka_retry.engine.heads.peek import PartitionHead, TierPeek
from airflow_kafka_retry.observability.metrics import emit_tier_backlog
from airflow_kafka_retry.policy.topology.file import load_topology
topology = load_topology({TOPOLOGY.source!r})
peek = TierPeek("orders-retry-2", "g", (0,), (PartitionHead(0, 5, 1_000, end_offset=12),))
print(emit_tier_backlog(peek, topology, topology.tier(2), now_ms=61_000))
"""
        done = subprocess.run(
            [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip().endswith("2"), done.stderr[-3000:]
        lines: list[str] = []
        while len(lines) < 2:  # Airflow sends some of its own (serde timing) too
            line = sock.recv(65536).decode()
            lines += [line] if line.startswith("airflow.kafka_retry.") else []
        lines.sort()
    tags = "topology=orders,tier_topic=orders-retry-2,tier=2"
    assert lines == [
        f"airflow.kafka_retry.tier.backlog,{tags}:7|g",
        f"airflow.kafka_retry.tier.oldest_due_age_ms,{tags}:60000|g",
    ]
