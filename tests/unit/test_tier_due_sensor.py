"""RetryTierDueSensor and TierDueTrigger decisions with a fake peek and a fake clock (no broker).

The Kafka edge (``peek_heads``) is replaced by a script of what each look sees; the clock only
moves when the trigger sleeps, so wake-up times are checked exactly.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException
from airflow.sdk import DAG, PokeReturnValue
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.module_loading import import_string
from airflow.sdk.serde import deserialize, serialize

from airflow_kafka_retry.engine.heads.peek import PartitionHead, PeekError, TierPeek
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sensors import tier_due as sensor_module
from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor, wait_limit
from airflow_kafka_retry.triggers import tier_due as trigger_module
from airflow_kafka_retry.triggers.tier_due import TierDueTrigger

NOW = 1_790_000_000_000  # 2026-09-21T..Z
MIN = 60_000
SECRET = "pw-never-in-trigger"
TOPOLOGY = Topology.from_mapping(
    {"topic": "orders", "group_id": "orders-svc", "attempts": 3, "backoff": {"kind": "fixed", "delay": "5m"}}
)
TIER = TOPOLOGY.tier(1)
GROUP = TOPOLOGY.consumer_group(TIER)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> int:
        return self.now


class FakePeek:
    """Answers each look with the next scripted ``{partition: due_ms}`` (``None`` = no due header)."""

    def __init__(self, *looks: dict[int, int | None] | Exception) -> None:
        self.looks = list(looks)
        self.calls: list[tuple] = []

    def __call__(self, kafka_config, topic, group, *, partitions=None, timeout_s=30.0):
        self.calls.append((dict(kafka_config), topic, group, partitions, timeout_s))
        look = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
        if isinstance(look, Exception):
            raise look
        heads = tuple(PartitionHead(p, 7, due) for p, due in sorted(look.items()))
        return TierPeek(topic, group, (0, 1, 2), heads)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(NOW)
    monkeypatch.setattr(trigger_module, "wall_clock_ms", clock)
    monkeypatch.setattr(sensor_module, "wall_clock_ms", clock)
    real_sleep = asyncio.sleep

    async def sleep(seconds, *args, **kwargs):
        clock.slept.append(seconds)
        clock.now += int(seconds * 1000)
        await real_sleep(0)

    monkeypatch.setattr(trigger_module.asyncio, "sleep", sleep)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": "broker:9092", "sasl.password": SECRET}}
        ),
    )
    return clock


@pytest.fixture
def peek(monkeypatch):
    def install(*looks):
        fake = FakePeek(*looks)
        monkeypatch.setattr(trigger_module, "peek_heads", fake)
        return fake

    return install


def make_sensor(**kwargs) -> RetryTierDueSensor:
    return RetryTierDueSensor(task_id="wait_for_due", topology=TOPOLOGY, tier=1, **kwargs)


def run_trigger(trigger: TierDueTrigger) -> list:
    async def collect():
        return [event async for event in trigger.run()]

    return asyncio.run(collect())


# ---------------------------------------------------------------------- trigger serialization
TRIGGER_KWARGS = {
    "topic": "orders-retry-1",
    "consumer_group": "orders-svc-orders-retry-1",
    "kafka_conn_id": "kafka_x",
    "partitions": [0, 2],
    "window": "22:00-04:00",
    "timezone": "Europe/Berlin",
    "deadline_ms": NOW + 5 * MIN,
    "wake_ms": NOW + MIN,
    "peek_timeout": 12.5,
}


@pytest.mark.parametrize("kwargs", [TRIGGER_KWARGS, {"topic": "t", "consumer_group": "g"}])
def test_trigger_round_trips_through_serialize(kwargs):
    trigger = TierDueTrigger(**kwargs)
    path, args = trigger.serialize()
    assert path == "airflow_kafka_retry.triggers.tier_due.TierDueTrigger"
    # every constructor argument, nothing else
    assert set(args) == {
        "topic",
        "consumer_group",
        "kafka_conn_id",
        "partitions",
        "window",
        "timezone",
        "deadline_ms",
        "wake_ms",
        "peek_timeout",
    }
    # as the triggerer stores and rebuilds it: serde-encoded, then the class from its dotted path
    rebuilt = import_string(path)(**deserialize(serialize(args)))
    assert rebuilt.serialize() == (path, args)
    for key, value in kwargs.items():
        assert args[key] == value


def test_the_sensor_defers_with_a_trigger_holding_no_configuration(clock, peek):
    peek({0: NOW + 2 * MIN})
    sensor = make_sensor(kafka_conn_id="kafka_default", max_wait=timedelta(minutes=10))
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    deferred = info.value
    assert deferred.method_name == "execute_complete"
    path, args = deferred.trigger.serialize()
    assert args == {
        "topic": "orders-retry-1",
        "consumer_group": GROUP,
        "kafka_conn_id": "kafka_default",
        "partitions": None,
        "window": None,
        "timezone": None,
        "deadline_ms": NOW + 10 * MIN,
        "wake_ms": NOW + 2 * MIN,
        "peek_timeout": 30.0,
    }
    assert SECRET not in repr(args)
    assert "broker:9092" not in repr(args)


# ---------------------------------------------------------------------- sensor decisions
def test_due_succeeds_with_due_partitions_and_earliest_due_time(clock, peek):
    fake = peek({0: NOW - MIN, 1: NOW + MIN, 2: NOW - 2 * MIN})
    result = make_sensor().execute({})
    assert result["due_partitions"] == [0, 2]
    assert result["earliest_due_ms"] == NOW - 2 * MIN
    assert result["pending_partitions"] == [0, 1, 2]
    assert (result["topic"], result["group"], result["tier"]) == ("orders-retry-1", GROUP, 1)
    assert result["checked_at_ms"] == NOW
    assert [h["partition"] for h in result["heads"]] == [0, 1, 2]
    # the peek got the connection's configuration, the tier's topic and group
    [(config, topic, group, partitions, _)] = fake.calls
    assert (config["bootstrap.servers"], topic, group, partitions) == (
        "broker:9092",
        "orders-retry-1",
        GROUP,
        None,
    )
    json.dumps(result)  # XCom-able


def test_a_head_without_due_header_is_due_now(clock, peek):
    peek({1: None})
    assert make_sensor().execute({})["due_partitions"] == [1]


def test_idle_tier_skips_at_once(clock, peek):
    fake = peek({})
    reason = r"orders-retry-1 \(group orders-svc-orders-retry-1\): nothing is pending"
    with pytest.raises(AirflowSkipException, match=reason):
        make_sensor(max_wait=60).execute({})
    assert len(fake.calls) == 1


def test_not_due_past_max_wait_skips_without_deferring(clock, peek):
    peek({0: NOW + 10 * MIN})
    with pytest.raises(AirflowSkipException, match="after the wait limit"):
        make_sensor(max_wait="5m").execute({})


def test_not_yet_due_defers_then_looks_again_at_the_earliest_due_time(clock, peek):
    fake = peek({0: NOW + 3 * MIN, 1: NOW + 2 * MIN}, {0: NOW + 3 * MIN, 1: NOW + 2 * MIN})
    sensor = make_sensor(max_wait="5m")
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    assert info.value.trigger.wake_ms == NOW + 2 * MIN
    [event] = run_trigger(info.value.trigger)
    assert clock.now == NOW + 2 * MIN  # slept exactly until the earliest due time, then looked again
    assert len(fake.calls) == 2  # the sensor's look, and the trigger's one look when the record is due
    assert event.payload["status"] == "due"
    result = sensor.execute_complete({}, event=event.payload)
    assert result["due_partitions"] == [1]
    assert result["earliest_due_ms"] == NOW + 2 * MIN


def test_trigger_keeps_waiting_while_new_heads_are_not_due_then_skips_at_the_deadline(clock, peek):
    # the head moves on (another record came first): each look waits for the new earliest due time
    fake = peek({0: NOW + MIN}, {0: NOW + 3 * MIN}, {0: NOW + 9 * MIN})
    trigger = TierDueTrigger(topic="orders-retry-1", consumer_group=GROUP, deadline_ms=NOW + 5 * MIN)
    [event] = run_trigger(trigger)
    assert len(fake.calls) == 3
    assert clock.now == NOW + 3 * MIN
    assert event.payload["status"] == "skip"
    with pytest.raises(AirflowSkipException, match="the next scheduled run will see them"):
        make_sensor().execute_complete({}, event=event.payload)


def test_trigger_reports_idle_when_the_records_went_away(clock, peek):
    peek({0: NOW + MIN}, {})
    [event] = run_trigger(TierDueTrigger(topic="orders-retry-1", consumer_group=GROUP))
    assert event.payload["status"] == "idle"
    with pytest.raises(AirflowSkipException, match="nothing is pending"):
        make_sensor().execute_complete({}, event=event.payload)


def test_trigger_turns_a_broker_error_into_an_error_event(clock, peek):
    peek(PeekError("orders-retry-1[2]: peek failed: Broker: Not leader"))
    [event] = run_trigger(TierDueTrigger(topic="orders-retry-1", consumer_group=GROUP))
    assert event.payload == {
        "status": "error",
        "message": "orders-retry-1[2]: peek failed: Broker: Not leader",
    }
    with pytest.raises(AirflowException, match=r"orders-retry-1\[2\]: peek failed"):
        make_sensor().execute_complete({}, event=event.payload)


def test_window_closed_defers_to_its_opening(clock, peek):
    clock.now = int(datetime.fromisoformat("2026-11-23T12:00:00+00:00").timestamp() * 1000)  # 13:00 Berlin
    opening = int(datetime.fromisoformat("2026-11-24T00:00:00+00:00").timestamp() * 1000)  # 01:00 Berlin
    due = clock.now - MIN
    fake = peek({0: due})
    sensor = make_sensor(window="01:00-05:00", timezone="Europe/Berlin")
    with pytest.raises(TaskDeferred) as info:
        sensor.execute({})
    assert info.value.trigger.serialize()[1]["window"] == "01:00-05:00"
    assert info.value.trigger.wake_ms == opening
    [event] = run_trigger(info.value.trigger)
    assert clock.now == opening
    assert len(fake.calls) == 2
    assert max(clock.slept) <= trigger_module.MAX_SLEEP_S  # long waits in bounded steps
    assert sensor.execute_complete({}, event=event.payload)["due_partitions"] == [0]


def test_window_opening_after_max_wait_skips(clock, peek):
    clock.now = int(datetime.fromisoformat("2026-11-23T12:00:00+00:00").timestamp() * 1000)
    peek({0: clock.now - MIN})
    with pytest.raises(AirflowSkipException, match="window 01:00-05:00 Europe/Berlin is closed"):
        make_sensor(window="01:00-05:00", timezone="Europe/Berlin", max_wait=timedelta(hours=1)).execute({})


def test_the_deadline_counts_from_the_first_look(clock, peek):
    peek({0: NOW + 4 * MIN})
    sensor = make_sensor(deferrable=False, max_wait="5m")
    assert sensor.poke({}) is False
    clock.now += 3 * MIN
    assert sensor.poke({}) is False  # due in 1 minute, within the 5 minutes from the first look
    clock.now += 2 * MIN
    peek({0: NOW + 6 * MIN})  # a new head, due after the deadline fixed at the first look
    with pytest.raises(AirflowSkipException):
        sensor.poke({})


def test_poke_mode_returns_the_xcom_value(clock, peek):
    peek({2: NOW})
    value = make_sensor(deferrable=False).poke({})
    assert isinstance(value, PokeReturnValue)
    assert value.is_done
    assert value.xcom_value["due_partitions"] == [2]


def test_non_deferrable_execute_pokes_until_due(clock, peek, monkeypatch):
    peek({0: NOW + 1000}, {0: NOW + 1000})
    monkeypatch.setattr("time.sleep", lambda s: setattr(clock, "now", clock.now + int(s * 1000)))
    result = make_sensor(deferrable=False, poke_interval=1).execute({})
    assert result["due_partitions"] == [0]


# ---------------------------------------------------------------------- parameters and templates
def test_template_fields_render(tmp_path):
    with DAG("t", schedule=None, start_date=datetime(2026, 1, 1)):
        sensor = RetryTierDueSensor(
            task_id="s",
            topology="{{ params.dir }}/orders.yaml",
            tier="{{ params.tier }}",
            kafka_conn_id="{{ params.conn }}",
            consumer_group="{{ params.conn }}-g",
            window="{{ params.window }}",
            timezone="{{ params.tz }}",
            params={
                "dir": str(tmp_path),
                "tier": "2",
                "conn": "k",
                "window": "01:00-05:00",
                "tz": "Europe/Berlin",
            },
        )
    sensor.render_template_fields({"params": sensor.params})
    rendered = (
        sensor.topology,
        sensor.tier,
        sensor.kafka_conn_id,
        sensor.consumer_group,
        sensor.window,
        sensor.timezone,
    )
    assert rendered == (f"{tmp_path}/orders.yaml", "2", "k", "k-g", "01:00-05:00", "Europe/Berlin")


def test_topology_from_a_file_and_tier_by_name(clock, peek, tmp_path):
    (tmp_path / "orders.yaml").write_text("topic: orders\ngroup_id: orders-svc\nattempts: 3\n")
    fake = peek({0: NOW})
    result = RetryTierDueSensor(
        task_id="s",
        topology=str(tmp_path / "orders.yaml"),
        tier="orders-retry-2",
        consumer_group="custom-group",
    ).execute({})
    assert result["tier"] == 2
    assert fake.calls[0][1:3] == ("orders-retry-2", "custom-group")


def test_bad_window_fails_when_the_dag_is_built():
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        make_sensor(window="01:00-05:00", timezone="Mars/Olympus")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (90, timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        (timedelta(hours=1), timedelta(hours=1)),
        (0.5, timedelta(seconds=0.5)),
    ],
)
def test_wait_limit(value, expected):
    assert wait_limit(value) == expected


@pytest.mark.parametrize("value", [-1, "soon", True])
def test_wait_limit_refuses(value):
    with pytest.raises(ValueError, match="max_wait"):
        wait_limit(value)


class RescheduledTaskInstance:
    def __init__(self, first: datetime | None) -> None:
        self.first = first

    def get_first_reschedule_date(self, context):
        return self.first


def test_reschedule_mode_counts_max_wait_from_the_first_reschedule(clock, peek):
    peek({0: NOW + 4 * MIN})
    sensor = make_sensor(deferrable=False, mode="reschedule", max_wait="5m")
    first = datetime.fromtimestamp((NOW - 2 * MIN) / 1000, tz=UTC)  # rescheduled 2 minutes ago
    with pytest.raises(AirflowSkipException, match="after the wait limit"):
        sensor.poke({"ti": RescheduledTaskInstance(first)})
    fresh = make_sensor(deferrable=False, mode="reschedule", max_wait="5m")
    assert fresh.poke({"ti": RescheduledTaskInstance(None)}) is False  # the first look starts the clock
