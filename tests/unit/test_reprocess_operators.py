"""Both reprocess operators: parameters, template fields, deadlines, and how a finished run is reported.

The engines are not involved here (they are tested against the real broker); these tests give the
reporting step hand-made run summaries.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import DAG, BaseNotifier
from airflow.sdk.execution_time.context import OutletEventAccessors
from structlog.testing import capture_logs

from airflow_kafka_retry.engine.drain.summary import DeadLetter, PartitionSummary, RunSummary
from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
from airflow_kafka_retry.operators.reprocess_report import notifier_summary
from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

from tests.unit.test_spark_submit import _fake_spark, airflow_connections  # noqa: F401 - a fixture

TOPOLOGY = str(Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml")
HANDLER = "tests.support.ledger_handler:indexed"
SERVER = "kafka-1:9092"
T0 = int(datetime(2026, 1, 1, 9, 58, tzinfo=UTC).timestamp() * 1000)
OPERATORS = [ReprocessTierOperator, SparkReprocessTierOperator]


def make(cls=ReprocessTierOperator, **kwargs: Any):
    kwargs.setdefault("task_id", "reprocess")
    kwargs.setdefault("topology", TOPOLOGY)
    kwargs.setdefault("tier", 1)
    kwargs.setdefault("handler", HANDLER)
    return cls(**kwargs)


class FakeTI:
    dag_id, run_id, task_id, map_index = "orders_retry_1", "manual__1", "reprocess", -1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def context() -> dict[str, Any]:
    return {"ti": FakeTI(), "run_id": "manual__1", "outlet_events": OutletEventAccessors()}


def summary(*partitions: PartitionSummary, stopped: str | None = None) -> RunSummary:
    return RunSummary(
        TOPOLOGY,
        1,
        "orders-retry-1",
        "orders-service-orders-retry-1",
        "local",
        T0,
        T0,
        T0 + 5,
        list(partitions),
        stopped,
    )


def busy(number: int = 0, *, dead: int = 0, dropped: int = 0, **kwargs: Any) -> PartitionSummary:
    p = PartitionSummary(
        "orders-retry-1",
        number,
        "g",
        drained=10,
        succeeded=10 - dead - dropped,
        committed_offset=10,
        **kwargs,
    )
    for i in range(dead):
        p.count_route("orders-dlt")
        p.count_dead_letter(
            DeadLetter(
                "orders-retry-1", number, i, "myapp.Invalid", "not retryable", "orders-dlt", number, i
            ),
            cap=100,
        )
    for i in range(dropped):
        p.dropped += 1
        p.count_dead_letter(DeadLetter("orders-retry-1", number, 100 + i, "myapp.Gone", "no_dlt"), cap=100)
    return p


class Recording(BaseNotifier):
    template_fields = ("message",)

    def __init__(self, message: str = "{{ kafka_retry_summary.topic }}") -> None:
        super().__init__()
        self.message = message
        self.calls: list[tuple[str, dict]] = []

    def notify(self, context):
        self.calls.append((self.message, context["kafka_retry_summary"]))


# ----------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("cls", OPERATORS)
def test_both_operators_template_the_shared_fields(cls):
    fields = set(cls.template_fields)
    assert {
        "topology",
        "tier",
        "handler",
        "value_deserializer",
        "key_deserializer",
        "kafka_conn_id",
        "options",
        "cutoff",
        "window",
        "timezone",
        "max_run",
    } <= fields


@pytest.mark.parametrize("cls", OPERATORS)
def test_template_fields_render(cls):
    with DAG("render", schedule=None, start_date=datetime(2026, 1, 1)):
        op = make(
            cls,
            tier="{{ params.tier }}",
            handler="{{ params.module }}:handle",
            value_deserializer="{{ params.module }}:decode",
            kafka_conn_id="{{ params.conn }}",
            options={"batch_size": "{{ params.batch }}"},
            cutoff="{{ params.cutoff }}",
            window="{{ params.window }}",
            timezone="{{ params.tz }}",
            max_run="{{ params.max_run }}",
            topology="{{ params.topology }}",
        )
    params = {
        "tier": 2,
        "module": "myapp.retry",
        "conn": "kafka_prod",
        "batch": 50,
        "cutoff": "2026-01-02T00:00:00",
        "window": "01:00-05:00",
        "tz": "Europe/Berlin",
        "max_run": "2h",
        "topology": TOPOLOGY,
    }
    op.render_template_fields({"params": params})
    assert (op.tier, op.handler, op.value_deserializer, op.kafka_conn_id) == (
        "2",
        "myapp.retry:handle",
        "myapp.retry:decode",
        "kafka_prod",
    )
    assert op.options == {"batch_size": "50"}
    assert op.cutoff == "2026-01-02T00:00:00"
    assert op.topology == TOPOLOGY
    assert (op.window, op.timezone, op.max_run) == ("01:00-05:00", "Europe/Berlin", "2h")
    assert op.reprocess_window().timezone == "Europe/Berlin"


@pytest.mark.parametrize("cls", OPERATORS)
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"options": {"batchsize": 3}}, "unknown option.*batchsize"),
        ({"options": {"handler": "x:y"}}, "pass handler as operator argument"),
        ({"options": {"deadline_ms": 5}}, "deadline_ms are set by the operator: use window/max_run"),
        ({"window": "1-5"}, "window '1-5' is not of the form 'HH:MM-HH:MM'"),
        ({"window": "01:00-05:00", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"timezone": "Europe/Berlin"}, "timezone is only used with a window"),
        ({"max_run": "two hours"}, "max_run: expected a duration like"),
        ({"max_run": 0}, "max_run must be longer than 0"),
        ({"on_dlt": ["not a notifier"]}, r"on_dlt\[0\] is a str, not a notifier"),
        ({"asset_server": "a:9092,b:9092"}, "asset server must be one 'host:port'"),
        (
            {"asset_server": SERVER, "tier": "{{ params.tier }}"},
            "asset_server needs the topology path and the tier",
        ),
        ({"asset_server": SERVER, "tier": 9}, "tier"),
    ],
)
def test_bad_parameters_fail_when_the_dag_is_parsed(cls, kwargs, error):
    with pytest.raises((ValueError, TypeError), match=error):
        make(cls, **kwargs)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_parallelism_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="parallelism must be an integer >= 1"):
        make(parallelism=value)


def test_templated_window_and_max_run_are_checked_when_rendered():
    op = make(window="{{ params.w }}", max_run="{{ params.m }}")  # not checked at parse time
    op.window, op.max_run = "25:00-01:00", "1h"
    with pytest.raises(ValueError, match="25:00 is not a time of day"):
        op.deadline(T0)


# ----------------------------------------------------------------------------- deadline
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, (None, None)),
        ({"window": "09:00-10:00"}, (T0 + 120_000, "window_closed")),
        ({"window": "10:00-11:00"}, (T0, "window_closed")),  # closed: stop before reading anything
        (
            {"window": "22:00-10:30", "timezone": "UTC"},
            (T0 + 32 * 60_000, "window_closed"),
        ),  # across midnight
        (
            {"window": "10:00-11:00", "timezone": "Europe/Berlin"},
            (T0 + 120_000, "window_closed"),
        ),  # 10:58 there
        ({"max_run": "90s"}, (T0 + 90_000, "max_run")),
        ({"max_run": timedelta(minutes=5)}, (T0 + 300_000, "max_run")),
        ({"max_run": 1000}, (T0 + 1000, "max_run")),
        ({"window": "09:00-10:00", "max_run": "1m"}, (T0 + 60_000, "max_run")),
        ({"window": "09:00-10:00", "max_run": "1h"}, (T0 + 120_000, "window_closed")),
    ],
)
def test_deadline_is_the_first_of_window_closing_and_max_run(kwargs, expected):
    assert make(**kwargs).deadline(T0) == expected


def test_the_deadline_goes_into_the_run_options():
    op = make(options={"batch_size": 5})
    assert op.drain_options(T0).deadline_ms == T0
    assert op.drain_options().deadline_ms is None
    assert op.drain_options(T0).batch_size == 5


# ----------------------------------------------------------------------------- report: notifiers
@pytest.mark.parametrize("cls", OPERATORS)
def test_notifiers_are_called_once_with_the_run_summary_when_records_reached_a_dlt(cls):
    recording, seen = Recording(), []
    op = make(cls, on_dlt=[recording, lambda ctx: seen.append(ctx["kafka_retry_summary"])])
    ctx = context()
    document = op.report(ctx, summary(busy(0, dead=2), busy(1, dead=1, dropped=1)), engine="Local")
    assert len(recording.calls) == 1
    assert len(seen) == 1
    message, given = recording.calls[0]
    assert message == "orders-retry-1"  # the notifier's template saw the summary
    assert given == seen[0] == ctx["kafka_retry_summary"]
    assert given["totals"]["dlt_topics"] == {"orders-dlt": 3}
    assert given["totals"]["dead_lettered"] == {"myapp.Gone": 1, "myapp.Invalid": 3}
    assert given["totals"]["dropped"] == 1
    assert [(d["partition"], d["offset"], d["dlt_topic"]) for d in given["dead_letters"]] == [
        (0, 0, "orders-dlt"),
        (0, 1, "orders-dlt"),
        (1, 0, "orders-dlt"),
        (1, 100, None),
    ]
    assert {k: v for k, v in given.items() if k not in ("dead_letters", "dead_letters_truncated")} == document


def test_notifiers_are_not_called_when_nothing_reached_a_dlt():
    recording = Recording()
    make(on_dlt=recording).report(context(), summary(busy(0), busy(1)), engine="Local")
    assert recording.calls == []


def test_a_dropped_record_alone_calls_the_notifiers():
    recording = Recording()
    make(on_dlt=recording).report(context(), summary(busy(0, dropped=1)), engine="Local")
    assert len(recording.calls) == 1


def test_a_notifier_that_raises_is_logged_and_fails_nothing(caplog):
    def broken(ctx):
        raise RuntimeError("slack is down")

    after = Recording()
    with caplog.at_level(logging.ERROR, logger="airflow_kafka_retry.notifications.dispatch"):
        document = make(on_dlt=[broken, after]).report(context(), summary(busy(0, dead=1)), engine="Local")
    assert document["status"] == "ok"
    assert len(after.calls) == 1
    assert "slack is down" in caplog.text


def test_notifier_summary_caps_the_coordinates_over_all_partitions():
    document = summary(busy(0, dead=3), busy(1, dead=3)).to_dict()
    capped = notifier_summary(document, cap=4)
    assert len(capped["dead_letters"]) == 4
    assert capped["dead_letters_truncated"] == 2


# ----------------------------------------------------------------------------- report: failures and stops
@pytest.mark.parametrize(
    ("cls", "engine"), [(ReprocessTierOperator, "Local"), (SparkReprocessTierOperator, "Spark")]
)
def test_a_failed_partition_fails_the_task_after_notifying_and_pushes_the_summary(cls, engine):
    recording = Recording()
    op = make(cls, on_dlt=recording, asset_server=SERVER)
    bad = PartitionSummary(
        "orders-retry-1", 1, "g", status="failed", error="RouteError: boom", committed_offset=4
    )
    ctx = context()
    with pytest.raises(AirflowException) as err:
        op.report(ctx, summary(busy(0, dead=1), bad), engine=engine)
    assert str(err.value).startswith(
        f"{engine} reprocessing of orders-retry-1 (tier 1, group "
        "orders-service-orders-retry-1) failed on 1 of 2 partition(s)"
    )
    assert "  partition 1: RouteError: boom (committed up to 4)" in str(err.value)
    assert ctx["ti"].xcom["summary"]["totals"]["failed_partitions"] == [1]
    assert len(recording.calls) == 1, "what partition 0 dead-lettered is committed: notify it"


def test_a_deadline_stop_is_reported_with_its_reason_and_what_is_left():
    stopped = busy(0, stop_reason="stopped", stopped_by="deadline", left=40)
    run = summary(stopped, busy(1, stop_reason="end"), stopped="deadline")
    with capture_logs() as logs:
        document = make(window="09:00-10:00").report(
            context(), run, engine="Local", deadline_reason="window_closed"
        )
    text = "\n".join(str(entry.get("event")) for entry in logs if entry["log_level"] == "warning")
    assert document["status"] == "ok"
    assert document["stopped"] == "window_closed"
    assert document["partitions"][0]["stopped_by"] == "window_closed"
    assert document["partitions"][0]["left"] == 40
    assert "orders-retry-1: stopped (window_closed) at a chunk boundary" in text
    assert "partition(s) 0 at offset 10 (40 left)" in text


# ----------------------------------------------------------------------------- report: assets
@pytest.mark.parametrize("cls", OPERATORS)
def test_outlets_are_the_next_tier_and_the_dlts(cls):
    op = make(cls, asset_server=SERVER, outlets=[])
    assert [a.uri for a in op.outlets] == [
        f"kafka://{SERVER}/{t}"
        for t in ("orders-retry-2", "orders-dlt", "orders-validation-dlt", "orders-parking")
    ]
    assert make(cls).outlets == []  # no asset_server: no assets


def test_asset_events_carry_the_counts_and_idle_outlets_emit_nothing():
    op = make(asset_server=SERVER)
    retry2, dlt, validation, parking = op.outlets
    first = busy(0, dead=2)
    first.count_route("orders-retry-2")
    ctx = context()
    op.report(ctx, summary(first, busy(1, dead=1)), engine="Local")
    events = ctx["outlet_events"]
    assert events[retry2].extra == {
        "records": 1,
        "source_topic": "orders-retry-1",
        "source_tier": 1,
        "group": "orders-service-orders-retry-1",
    }
    assert events[dlt].extra["records"] == 3
    assert op.outlets == [retry2, dlt], "an outlet that received nothing must not get an event"
    json.dumps(events[dlt].extra)


def test_user_outlets_are_kept():
    from airflow.sdk import Asset

    mine = Asset("s3://bucket/report")
    op = make(asset_server=SERVER, outlets=[mine])
    op.report(context(), summary(busy(0)), engine="Local")
    assert op.outlets == [mine]


# ----------------------------------------------------------------------------- stopping the local run
def test_on_kill_asks_every_partition_to_stop_and_keeps_the_first_reason():
    op = make()
    assert op._should_stop() is None
    op.on_kill()
    op.request_stop("interrupted")
    assert op._should_stop() == "killed"


def test_an_interruption_of_the_task_thread_waits_for_the_chunk_boundary():
    """``execution_timeout`` raises in the task's thread from a signal handler: the drain must stop
    cleanly."""
    op = make()
    boundary_reached = threading.Event()

    def drain():
        while op._should_stop() is None:  # a partition between chunks, asking before each one
            time.sleep(0.01)
        time.sleep(0.2)  # finishing (committing) the chunk it is in
        boundary_reached.set()
        return summary(busy(0, stop_reason="stopped", stopped_by=op._should_stop()))

    def alarm(signum, frame):
        raise TimeoutError("execution_timeout")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        with pytest.raises(TimeoutError):
            op._run(drain)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert boundary_reached.is_set(), "the task went on before the partitions stopped"
    assert op._should_stop() == "interrupted"


# ----------------------------------------------------------------------------- the Spark operator's deadline
@pytest.mark.usefixtures("airflow_connections")
def test_spark_operator_sends_the_deadline_in_the_options_and_reports_the_window(tmp_path, monkeypatch):
    seen: dict = {}
    stopped = busy(0, stop_reason="stopped", stopped_by="deadline", left=3)
    _fake_spark(monkeypatch, seen, document=summary(stopped, stopped="deadline").to_dict())
    op = make(SparkReprocessTierOperator, window="00:00-24:00", result_path=str(tmp_path / "summary.json"))
    before = int(time.time() * 1000)
    document = op.execute(context())
    sent = json.loads(seen["args"][seen["args"].index("--options-json") + 1])
    midnight = (before // 86_400_000 + 1) * 86_400_000
    assert sent["deadline_ms"] == midnight
    assert sent["handler"] == HANDLER
    assert document["stopped"] == "window_closed"
    assert document["partitions"][0]["stopped_by"] == "window_closed"


@pytest.mark.usefixtures("airflow_connections")
def test_spark_operator_without_window_or_max_run_sends_no_deadline(tmp_path, monkeypatch):
    seen: dict = {}
    _fake_spark(monkeypatch, seen, document=summary(busy(0)).to_dict())
    make(SparkReprocessTierOperator, result_path=str(tmp_path / "summary.json")).execute(context())
    assert json.loads(seen["args"][seen["args"].index("--options-json") + 1])["deadline_ms"] is None


def test_a_run_started_by_a_tier_wave_waits_until_the_wave_is_due_then_drains_from_now():
    from types import SimpleNamespace

    from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
    from airflow_kafka_retry.operators.reprocess_base import wave_not_before_ms

    def wave(kind, not_before):
        return SimpleNamespace(
            extra={"from_trigger": True, "payload": {"kind": kind, "not_before_ms": not_before}}
        )

    now = int(time.time() * 1000)
    context = {
        "triggering_asset_events": {
            "due-asset": [
                wave("tier_due", now + 300),
                wave("tier_due", now + 600),
                wave("dlt_arrival", now + 60_000),
            ],
            "other": [SimpleNamespace(extra={"records": 3})],
        }
    }
    assert wave_not_before_ms(context) == now + 600  # the latest tier wave: every wave's records are due
    assert wave_not_before_ms({}) is None
    assert wave_not_before_ms({"triggering_asset_events": {}}) is None
    op = ReprocessTierOperator(task_id="r", topology="t.yaml", tier=1, handler="m:f", cutoff="now")
    started = time.monotonic()
    op.wait_for_wave(context, op._should_stop)
    assert time.monotonic() - started >= 0.5
    assert op.cutoff_ms({}) >= now + 600
    # a kill during the wait ends it at once
    op.request_stop("killed")
    started = time.monotonic()
    op.wait_for_wave({"triggering_asset_events": {"a": [wave("tier_due", now + 50_000)]}}, op._should_stop)
    assert time.monotonic() - started < 5
