"""
Header values are bounded before XCom, a notifier, a log, a metric or the view (issue 38 items 2 and 6).

A forged DLT record chooses its exception class names: 200 of them with 100 kB names used to give 20 MB
of totals in XCom, the notifier payload and the task log; a CR/LF in a name forged log lines; the view
kept every distinct name; long named classes pushed the watch's commit metadata past Kafka's
``offset.metadata.max.bytes`` (4096), so every watch run failed its commit. No broker: the scan and the
commit are stand-ins, everything between them is the operator's own code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kafka_retry.observability.metrics import OTHER, exception_tags, sanitize_tag
from airflow_kafka_retry.plugin import scans
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.policy.topology.file import load_topology

from tests.unit.test_dlt_watch_summary import FakeMessage

ORDERS = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"
KAFKA_METADATA_LIMIT = 4096  # offset.metadata.max.bytes, Kafka's default
FORGED_LINE = "FORGED ERROR the payment service is down"


def _record(offset: int, exception: str, cause: str | None = None, topic: str = "orders-dlt") -> FakeMessage:
    headers = [("kafka_exception-fqcn", exception.encode())]
    if cause is not None:
        headers.append(("kafka_exception-cause-fqcn", cause.encode()))
    headers += [
        ("kafka_dlt-original-topic", exception.encode()),
        ("kafka_dlt-original-consumer-group", b"g\r\nx"),
    ]
    return FakeMessage(topic, 0, offset, headers)


def _run_watch(monkeypatch, topology_path, messages, admitted=frozenset()):
    """Run DltWatchOperator.execute over ``messages``; returns (result, notifier payloads, committed tags)."""
    import airflow_kafka_retry.engine.kafka.authorization as authorization
    import airflow_kafka_retry.engine.kafka.topic_admin as engine_topics
    import airflow_kafka_retry.engine.scans.dlt_scan as engine_watch
    import airflow_kafka_retry.observability.metrics as metrics
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
    from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator

    committed: dict = {}

    def fake_scan(kafka_config, topics, group, summary, *, timeout_s):
        for message in messages:
            summary.add(message)
        key = (topics[0], 0)
        return engine_watch.DltScan(group, {key: -1}, {key: len(messages)}, frozenset(admitted))

    def fake_commit(kafka_config, group, offsets, tags=()):
        committed["metadata"] = json.dumps({"tags": sorted(tags)}, separators=(",", ":"))
        committed["tags"] = set(tags)

    monkeypatch.setattr(engine_watch, "scan_new_records", fake_scan)
    monkeypatch.setattr(engine_watch, "commit_offsets", fake_commit)
    monkeypatch.setattr(engine_topics, "missing_topics", lambda config, topics: [])
    monkeypatch.setattr(authorization, "require", lambda config, needed, *, timeout: None)  # the ACL check
    monkeypatch.setattr(KafkaRetryHook, "kafka_config", lambda self: {"bootstrap.servers": "127.0.0.1:9"})
    monkeypatch.setattr(metrics, "emit", lambda sent: len(list(sent)))
    payloads: list = []
    op = DltWatchOperator(
        task_id="watch",
        topology=str(topology_path),
        on_dlt=[lambda c: payloads.append(c["kafka_retry_summary"])],
    )
    result = op.execute({})
    return result, payloads, committed


def _strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_forged_exception_names_are_bounded_in_xcom_the_notifier_and_the_log(monkeypatch, capsys):
    forged = [_record(i, f"com.evil.E{i:03d}" + "x" * 100_000, cause="c" * 100_000) for i in range(200)]
    forged.append(_record(200, f"com.evil.Log\r\n{FORGED_LINE}", cause=f"x\n{FORGED_LINE}"))
    result, payloads, _ = _run_watch(monkeypatch, ORDERS, forged)
    size = len(json.dumps(result))
    assert size < 100_000, f"{size} characters of summary in XCom"
    assert len(json.dumps(payloads[0])) < 100_000, "the notifier's payload"
    totals = result["totals"]
    assert sum(totals["dead_lettered"].values()) == 201, "bounded, but every record still counted"
    assert sum(totals["causes"].values()) == 201
    assert len(totals["dead_lettered"]) <= 51
    for text in _strings(result):
        assert "\n" not in text, f"a control character reached XCom: {text[:80]!r}"
        assert "\r" not in text, f"a control character reached XCom: {text[:80]!r}"
        assert len(text) <= 300, f"a {len(text)}-character value reached XCom"
    printed = capsys.readouterr()
    log = printed.out + printed.err
    assert not any(line.startswith(FORGED_LINE) for line in log.splitlines()), "a forged log line"
    assert len(log) < 100_000, f"{len(log)} characters of task log"


def test_the_committed_metadata_stays_under_kafkas_limit_with_long_named_classes(monkeypatch, tmp_path):
    named = [f"com.acme.e{i:02d}.{'Named' * 30}" for i in range(40)]  # 40 classes of 170 characters
    topology = tmp_path / "orders.yaml"
    topology.write_text(
        ORDERS.read_text().replace(
            "not_retryable: [json.JSONDecodeError, myapp.errors.InvalidOrder]",
            f"not_retryable: [json.JSONDecodeError, myapp.errors.InvalidOrder, {', '.join(named)}]",
        )
    )
    assert len(load_topology(topology).not_retryable) == 42
    records = [_record(i, name) for i, name in enumerate(named)]
    records += [_record(100 + i, f"com.evil.e{i:02d}.{'Long' * 40}") for i in range(30)]
    _, _, committed = _run_watch(monkeypatch, topology, records)
    assert len(committed["metadata"].encode()) <= KAFKA_METADATA_LIMIT, len(committed["metadata"])
    # a later run reads the metadata back: still under the limit, whatever it admitted
    again = _run_watch(monkeypatch, topology, records, admitted=committed["tags"])[2]
    assert len(again["metadata"].encode()) <= KAFKA_METADATA_LIMIT


def test_named_classes_do_not_count_against_the_tag_cap():
    topology = load_topology(ORDERS)
    named = {sanitize_tag(c) for c in topology.not_retryable}  # what an earlier watch committed
    tags = exception_tags(topology, {"com.acme.New": 1}, admitted=named, cap=len(named))
    assert tags["com.acme.New"] == "com.acme.New", "the topology's own classes took the cap"
    assert OTHER not in tags.values()


def test_the_views_dead_letter_counts_are_bounded(monkeypatch):
    class Counts:
        def to_dict(self):
            by_exception = {f"com.evil.E{i}\n{FORGED_LINE}": 1 for i in range(20_000)}
            return {
                "topic": "orders-dlt",
                "total": 20_000,
                "truncated": False,
                "error": None,
                "by_exception": by_exception,
                "by_hour": [{"hour": "2026-11-28T12:00Z", "counts": dict(by_exception)}],
            }

    monkeypatch.setattr(scans, "count_dead_letters", lambda *args, **kwargs: Counts())
    monkeypatch.setattr(scans, "scan_backlog", lambda *args, **kwargs: Counts())
    settings = ViewSettings(
        topologies=(str(ORDERS),),
        kafka_conn_id="kafka_default",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=5,
        runs=1,
    )
    scan = scans.read_topology(load_topology(ORDERS), settings, {}, now_ms=0)
    dead = scan.dead["orders-dlt"]
    for counts in (dead["by_exception"], dead["by_hour"][0]["counts"]):
        assert len(counts) <= 51, f"{len(counts)} distinct exception classes in the view"
        assert sum(counts.values()) == 20_000, "bounded, but every record still counted"
        assert not any("\n" in name for name in counts)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("com.acme.Plain", "com.acme.Plain"),
        ("a\r\nb\tc\x1b[31m\x00\u2028", "a\\r\\nb\\tc\\x1b[31m\\x00\\u2028"),
    ],
)
def test_one_bound_escapes_control_characters(raw, shown):
    from airflow_kafka_retry.policy.headers.bounds import bound_value

    assert bound_value(raw) == shown


def test_one_bound_caps_length_and_count():
    from airflow_kafka_retry.policy.headers.bounds import (
        MAX_DISTINCT_VALUES,
        MAX_VALUE_CHARS,
        OTHER_VALUES,
        bound_counts,
        bound_value,
    )

    long = bound_value("x" * 100_000)
    assert len(long) <= MAX_VALUE_CHARS
    assert long.endswith("(100000 characters)")
    assert bound_value(None) is None
    counts = bound_counts({f"E{i}": i for i in range(1, 1001)})
    assert len(counts) == MAX_DISTINCT_VALUES + 1
    assert counts["E1000"] == 1000, "the most frequent are kept"
    assert counts[OTHER_VALUES] == sum(range(1, 1001 - MAX_DISTINCT_VALUES))
    assert bound_counts({"a\n": 1, "a\\n": 2}) == {"a\\n": 3}, "names that look alike once escaped merge"
