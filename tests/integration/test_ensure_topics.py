"""Creating and checking a topology's retry and DLT topics against the main topic, on the broker under test.

``max.message.bytes`` is only compared when the broker reports it: Tansu reports a topic's value only
when it was set explicitly (and does not enforce it), real Kafka always reports it. Each test sets it
on the main topic, so the comparison runs on both.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import ConfigResource

from airflow_kafka_retry.engine.kafka.topic_admin import (
    MainTopicMissingError,
    ensure_retry_topics,
    topology_topics,
)
from airflow_kafka_retry.operators.ensure_topics import EnsureRetryTopicsOperator
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import (
    admin_client,
    create_topics,
    delete_topics,
    unique_topic,
)

pytestmark = pytest.mark.integration

MAIN_LIMIT = 2_000_000


def _topology(main: str) -> Topology:
    return Topology.from_mapping(
        {
            "topic": main,
            "group_id": f"{main}-svc",
            "attempts": 3,
            "backoff": {"kind": "custom", "delays": ["1s", "2s"]},
            "dlt_routing": {"-validation-dlt": ["myapp.InvalidOrder"]},
        }
    )


@pytest.fixture
def topology(kafka_bootstrap):
    main = unique_topic("ensure")
    topology = _topology(main)
    yield topology
    delete_topics(kafka_bootstrap, topology_topics(topology))


def _describe(bootstrap: str, topics: list[str]) -> dict[str, tuple[int, str | None]]:
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + 15  # a topic just created reaches the broker's metadata a moment later
    while not set(topics) <= set(meta := admin.list_topics(timeout=10).topics):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    limits = {}
    for res, fut in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    ).items():
        entry = fut.result(10).get("max.message.bytes")
        limits[res.name] = entry.value if entry is not None else None
    return {t: (len(meta[t].partitions), limits[t]) for t in topics}


def test_main_topic_must_exist(kafka_bootstrap, topology):
    with pytest.raises(MainTopicMissingError, match=f"main topic '{topology.topic}' .* does not exist"):
        ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
    assert not set(topology_topics(topology)) & set(
        admin_client(kafka_bootstrap).list_topics(timeout=10).topics
    )


def test_creates_missing_topics_sized_after_the_main_topic(kafka_bootstrap, topology):
    create_topics(kafka_bootstrap, [topology.topic], 3, config={"max.message.bytes": str(MAIN_LIMIT)})
    report = ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
    others = topology_topics(topology)[1:]
    assert others == [
        f"{topology.topic}-retry-1",
        f"{topology.topic}-retry-2",
        f"{topology.topic}-dlt",
        f"{topology.topic}-validation-dlt",
        f"{topology.topic}-parking",
    ]
    assert (report.created, report.existing, report.mismatches) == (others, [], [])
    assert (report.partitions, report.max_message_bytes) == (3, MAIN_LIMIT)
    assert _describe(kafka_bootstrap, others) == {t: (3, str(MAIN_LIMIT)) for t in others}
    # a second run creates nothing and finds nothing wrong
    again = ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
    assert (again.created, again.existing, again.mismatches) == ([], others, [])


def test_existing_topics_smaller_than_the_main_topic_are_each_reported(kafka_bootstrap, topology):
    main, retry1, retry2, dlt, validation, parking = topology_topics(topology)
    create_topics(kafka_bootstrap, [main], 4, config={"max.message.bytes": str(MAIN_LIMIT)})
    create_topics(
        kafka_bootstrap, [retry1], 2, config={"max.message.bytes": str(MAIN_LIMIT)}
    )  # fewer partitions
    create_topics(kafka_bootstrap, [dlt], 6, config={"max.message.bytes": "1000"})  # smaller limit
    create_topics(kafka_bootstrap, [validation], 1, config={"max.message.bytes": "999"})  # both
    report = ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
    assert report.created == [retry2, parking]
    assert report.existing == [retry1, dlt, validation]
    found = [(m.topic, m.setting, m.actual, m.required) for m in report.mismatches]
    assert found == [
        (retry1, "partitions", 2, 4),
        (dlt, "max.message.bytes", 1000, MAIN_LIMIT),
        (validation, "partitions", 1, 4),
        (validation, "max.message.bytes", 999, MAIN_LIMIT),
    ]
    assert str(report.mismatches[0]) == (
        f"topic '{retry1}' has partitions=2, less than main topic '{main}' (4): "
        "records cannot keep their partition"
    )
    assert _describe(kafka_bootstrap, [retry1, dlt]) == {retry1: (2, str(MAIN_LIMIT)), dlt: (6, "1000")}, (
        "existing topics must be left as they are"
    )

    # the operator fails naming every mismatch, or only warns with on_mismatch="warn"
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ENSURE_TEST", json.dumps(conn))
        strict = EnsureRetryTopicsOperator(task_id="t", topology=topology, kafka_conn_id="ensure_test")
        with pytest.raises(Exception, match="4 retry topic mismatch") as failed:
            strict.execute({})
        for mismatch in report.mismatches:
            assert str(mismatch) in str(failed.value)
        lenient = EnsureRetryTopicsOperator(
            task_id="t", topology=topology, kafka_conn_id="ensure_test", on_mismatch="warn"
        )
        result = lenient.execute({})
    assert result["created"] == []
    assert result["mismatches"] == [str(m) for m in report.mismatches]


def _configs(bootstrap: str, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = admin_client(bootstrap)  # kept until the answer is in
    entries = admin.describe_configs([resource])[resource].result(10)
    return {n: getattr(entries.get(n), "value", None) for n in names}


def test_ordering_creates_the_hold_and_state_topics_and_reports_a_state_topic_that_does_not_compact(
    kafka_bootstrap,
):
    """``ordering: key``: the hold topic deletes (never by age), the state topic compacts; an existing
    state topic with another policy is reported with the command that fixes it, and left as it is."""
    from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
    from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics

    main = unique_topic("ordered")
    topology = Topology.from_mapping(
        {
            "topic": main,
            "group_id": f"{main}-svc",
            "attempts": 2,
            "backoff": {"delay": "1s"},
            "ordering": "key",
        }
    )
    hold, state = f"{main}-hold", f"{main}-order-state"
    try:
        create_topics(kafka_bootstrap, [main], 3, config={"max.message.bytes": str(MAIN_LIMIT)})
        report = ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
        assert report.created[-2:] == [hold, state]
        assert report.mismatches == []
        assert _describe(kafka_bootstrap, [hold, state]) == {t: (3, str(MAIN_LIMIT)) for t in (hold, state)}
        names = ("cleanup.policy", "retention.ms")
        assert _configs(kafka_bootstrap, hold, names) == {"cleanup.policy": "delete", "retention.ms": "-1"}
        assert _configs(kafka_bootstrap, state, names)["cleanup.policy"] == "compact"

        delete_topics(kafka_bootstrap, [state])
        create_topics(
            kafka_bootstrap,
            [state],
            3,
            config={"cleanup.policy": "delete", "max.message.bytes": str(MAIN_LIMIT)},
        )
        again = ensure_retry_topics(topology, {"bootstrap.servers": kafka_bootstrap})
        assert [(m.topic, m.setting, m.actual, m.required) for m in again.mismatches] == [
            (state, "cleanup.policy", "delete", "compact")
        ]
        assert f"--entity-name {state} --add-config cleanup.policy=compact" in str(again.mismatches[0])
        with pytest.raises(KafkaConfigError, match=f"'{state}' has cleanup.policy=delete"):
            ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=3)
        assert _configs(kafka_bootstrap, state, names)["cleanup.policy"] == "delete", "never altered"
    finally:
        delete_topics(kafka_bootstrap, topology_topics(topology))
