"""
Back-off retries for a Kafka 4.4 share group under a real Airflow 3 (issue 41 item 3), through the real parts.

A DAG file calls ``build_retry_dags`` on an ``on_due: redeliver`` topology with no handler and no
``include_main``; Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor on PostgreSQL)
runs it. A real ``ShareConsumer`` rejects records on their first rounds; the broker dead-letters them to
``dlq.<group>``; the topology's watcher (in the triggerer) fires the DAG's ``main`` task when the DLQ has
records and its ``retry_<n>`` tasks when a tier's records fall due; those redeliver each record to its source
partition with its round, and the share consumer takes it again (``testkit/share_retry_airflow.py``).

Checked: every round's delivery in order (the rounds carried across the DLQ by the redelivery log), none
redelivered before its due time, each back on its source partition, every record accepted once or in the
DLT once with its first source coordinates, every task run started by the watcher, none failed. Reported,
not asserted (timing): the redelivery lateness (redelivered record's produce time minus its due time), the
machine's load average and the test's wall time.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_kafka_retry.policy.headers.codec import read_original_coordinates
from testkit.share_retry_airflow import load_average, share_retries_in_airflow

from tests.support.dead_letter_fixtures import read_exactly

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.kafka import ApacheKafka

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).parents[2]
ATTEMPTS = 3  # the source's round, then two redeliveries
BACKOFF = {"kind": "fixed", "delay": "6s"}
#: key -> the round the share consumer accepts it on (None: never: it ends in the DLT)
PLAN: dict[bytes, int | None] = {
    b"ok-0": 1,
    b"second-0": 2,
    b"second-1": 2,
    b"second-2": 2,
    b"third-0": 3,
    b"third-1": 3,
    b"never-0": None,
    b"never-1": None,
}
NEVER = sorted(k for k, v in PLAN.items() if v is None)
REPROCESS_TASKS = {"main", "retry_1", "retry_2"}


def test_airflow_redelivers_rejected_records_when_due_with_their_round(
    share_dlq_kafka: ApacheKafka, airflow_database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    started, load_before = time.monotonic(), load_average()
    bootstrap = share_dlq_kafka.bootstrap
    run = share_retries_in_airflow(
        bootstrap,
        airflow_database_url,
        tmp_path,
        plan=PLAN,
        attempts=ATTEMPTS,
        backoff=BACKOFF,
        repo=REPO,
    )
    deliveries = run.deliveries
    redelivered = [d for d in deliveries if d.attempt > 1]
    late = sorted((d.timestamp_ms - d.due_ms) / 1000 for d in redelivered if d.due_ms is not None)
    with capsys.disabled():
        figure = f"p50 {statistics.median(late):.2f}s, max {late[-1]:.2f}s" if late else "none redelivered"
        print(
            f"\nshare-group redelivery lateness through Airflow (produced - due; target p50 <= 1.5s, "
            f"max <= 3s): {figure} over {len(late)} redeliveries, back-off {BACKOFF['delay']}; records "
            f"ended {run.flow_s:.0f}s after the first was produced; test wall time "
            f"{time.monotonic() - started:.0f}s; load average {load_before} before, {load_average()} after"
        )
    failed = [row for row in run.task_states if row[3] == "failed"]
    assert not failed, (failed, run.failed_logs)
    assert run.settled, f"not every record ended: deliveries {deliveries}; tasks {run.task_states}"

    # each round's delivery, in order: round 3 is reached only through the redelivery log, since the DLQ
    # drops a redelivered record's headers
    rounds: dict[bytes, list[int]] = {}
    for d in deliveries:
        rounds.setdefault(d.key, []).append(d.attempt)
    assert rounds == {key: list(range(1, (on or ATTEMPTS) + 1)) for key, on in PLAN.items()}

    # never redelivered before due, always back on its source partition as a new record
    for d in redelivered:
        assert d.due_ms is not None, d
        assert d.timestamp_ms >= d.due_ms, f"{d.key!r} round {d.attempt} redelivered before it was due"
        assert (d.topic, d.partition) == (run.topology.topic, run.placed[d.key][0]), d
        assert d.offset != run.placed[d.key][1], d

    # every record ends once: accepted by the share consumer, or in the DLT with its first source
    accepted = Counter(d.key for d in deliveries if d.accepted)
    assert accepted == Counter({k: 1 for k, v in PLAN.items() if v is not None})
    dlt = read_exactly(bootstrap, str(run.topology.dlt_topic), len(NEVER))
    assert sorted(bytes(m.key() or b"") for m in dlt) == NEVER
    for message in dlt:
        key = bytes(message.key() or b"")
        first = read_original_coordinates(message.headers() or [])  # type: ignore[arg-type]
        assert (first.topic, first.partition, first.offset) == (run.topology.topic, *run.placed[key])
        assert message.value() == b"v-" + key

    # the watcher started every run that drained: the input lane and both tiers ran, each in a run of an
    # asset event (not a sweep or a manual run)
    ran = [(run_type, task) for _, run_type, task, state in run.task_states if state == "success"]
    assert {task for _, task in ran} >= REPROCESS_TASKS, ran
    assert {run_type for run_type, task in ran if task in REPROCESS_TASKS} == {"asset_triggered"}, ran
