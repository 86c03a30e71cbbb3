"""
The redrive flow of a DLT's page in the Retry tiers view, in a browser (tests/integration/test_view_page.py).

A user who may trigger the replay DAG filters the DLT, dry-runs (what would move, and where), redrives at a
low rate, watches the progress bar and stops the replay mid-way; one who may not sees the records but no
redrive control. The test's Airflow runs no scheduler: the test runs the triggered DAG run's task itself
(``airflow tasks test`` on that run), as a scheduler's worker would.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support.warm_airflow import run_airflow

#: The failure of the records redriven (the fixture's other DLT records are left alone).
TIMEOUT = "myapp.errors.Timeout"
#: A few dozen records at a rate that moves them in about 20 s: Stop, clicked once 2 moved, lands mid-way.
RECORDS, RATE = 40, 2
WAIT_MS = 60_000


def produce_timeouts(bootstrap: str, name: str) -> None:
    """``RECORDS`` dead letters of ``TIMEOUT`` in ``<name>-dlt``, failed in ``name`` (partition i % 2)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        headers = [
            ("kafka_original-topic", name.encode()),
            ("kafka_original-partition", (i % 2).to_bytes(4, "big")),
            ("kafka_original-offset", (200 + i).to_bytes(8, "big")),
            ("kafka_exception-fqcn", TIMEOUT.encode()),
        ]
        producer.produce(f"{name}-dlt", b'{"order": 3}', partition=i % 2, headers=headers)
    assert producer.flush(15) == 0


def open_dlt_page(page: Any, base: str, name: str) -> None:
    page.goto(f"{base}/kafka-retry/")
    page.wait_for_selector("body[data-loaded=true]", timeout=WAIT_MS)
    page.locator(f'[data-open-dlt="{name}-dlt"]').click()
    page.wait_for_selector("body[data-dlt-loaded=true]", timeout=WAIT_MS)


def _text_is(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([s, t]) => (document.querySelector(s) || {}).textContent === t",
        arg=[selector, text],
        timeout=WAIT_MS,
    )


def filter_and_dry_run(page: Any, name: str) -> None:
    """Filter on ``TIMEOUT``: the records listed; then the dry run: every one to its original partition."""
    page.fill('#dlt-filters input[name="exception"]', TIMEOUT)
    page.get_by_role("button", name="Apply filters").click()
    _text_is(page, "[data-matched]", str(RECORDS))
    rows = page.locator("tr[data-record]")
    assert rows.count() == RECORDS
    assert set(rows.locator("[data-record-exception]").all_inner_texts()) == {TIMEOUT}
    page.get_by_role("button", name="Dry run").click()
    _text_is(page, "[data-dry-run-count]", str(RECORDS))
    assert page.locator("[data-dry-run-targets]").inner_text() == f"{name}: {RECORDS}"
    moves = page.locator("tr[data-move]")
    assert moves.count() == RECORDS
    for i in range(RECORDS):
        partition = moves.nth(i).get_attribute("data-move").split("@")[0]
        assert moves.nth(i).locator("[data-move-target]").inner_text() == f"{name}[{partition}]"


def redrive_and_stop(page: Any, run_task: Any, screenshot: str) -> tuple[str, int]:
    """Redrive at ``RATE``/s, see it move, stop it: its replay id and how many it moved."""
    page.fill("#redrive-rate", str(RATE))
    page.get_by_role("button", name="Redrive", exact=True).click()
    progress = page.wait_for_selector("[data-dag-run-id]", timeout=WAIT_MS)
    replay_id, run_id = progress.get_attribute("data-replay-id"), progress.get_attribute("data-dag-run-id")
    run_task(run_id)
    page.wait_for_function(
        "Number((document.querySelector('[data-replay-moved]') || {dataset: {}}).dataset.replayMoved) >= 2",
        timeout=120_000,
    )
    page.screenshot(path=screenshot, full_page=True)
    page.get_by_role("button", name="Stop", exact=True).click()
    page.wait_for_selector('[data-replay-state="stopped"]', timeout=WAIT_MS)
    moved = int(page.locator("[data-replay-moved]").get_attribute("data-replay-moved"))
    assert f"moved {moved} of {RECORDS}" in page.locator("[data-replay-status]").inner_text()
    said = page.locator("[data-replay-status]").inner_text()
    assert "stop requested by admin on " in said, said
    assert "(from the Retry tiers view)" in said, said
    assert page.get_by_role("button", name="Resume").is_visible()
    _text_is(page, f'tr[data-audit="{replay_id}"] [data-audit-state]', "stopped")
    return replay_id, moved


def no_redrive_control(page: Any) -> None:
    """The records, but no dry run, Redrive or Stop: the user may not trigger the replay DAG."""
    assert page.locator("tr[data-record]").count() > 0
    for control in ("#dry-run", "#redrive", "#redrive-stop", "#redrive-rate"):
        assert page.locator(control).count() == 0, control


def committed_records(bootstrap: str, topic: str) -> int:
    """How many committed records ``topic`` holds (``read_committed``, each partition to its EOF)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"redrive-check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    count = 0
    try:
        waiting = set(consumer.list_topics(topic, timeout=15).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in waiting])
        while waiting:
            message = consumer.poll(15)
            assert message is not None, f"{topic}: partitions {sorted(waiting)} did not reach their end"
            if message.error() is None:
                count += 1
            elif message.error().code() == KafkaError._PARTITION_EOF:
                waiting.discard(message.partition())
            else:
                raise KafkaException(message.error())
    finally:
        consumer.close()
    return count


def redrive_flow(
    browser: Any,
    api_server: dict[str, Any],
    bootstrap: str,
    *,
    tokens: dict[str, str],
    request: Callable[..., tuple[int, dict]],
    screenshot: str,
) -> None:
    """
    Filter, dry run, redrive at a low rate, progress, stop; the status says how many moved, and so does Kafka.

    The viewer (who may not trigger the replay DAG) sees the records but no redrive control, and gets 403
    from Airflow's trigger endpoint (Redrive) and from the page's dry-run and stop endpoints.
    """
    base, name = api_server["base"], api_server["topic"]
    produce_timeouts(bootstrap, name)
    replay_dag = f"kafka_dlt_replay__{name}"
    runs: list[subprocess.CompletedProcess] = []
    workers: list[threading.Thread] = []

    def run_task(run_id: str) -> None:
        def run() -> None:
            args = ("tasks", "test", replay_dag, "replay_dlt", run_id)
            runs.append(run_airflow(api_server["env"], *args, timeout=240))

        workers.append(threading.Thread(target=run, daemon=True))
        workers[0].start()

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_cookies([{"name": "_token", "value": tokens["admin"], "url": base}])
    page = context.new_page()
    open_dlt_page(page, base, name)
    filter_and_dry_run(page, name)
    replay_id, moved = redrive_and_stop(page, run_task, screenshot)
    context.close()
    workers[0].join(240)
    assert runs, "the replay DAG's task did not end"
    assert runs[0].returncode == 0, (runs[0].stdout + runs[0].stderr)[-3000:]
    assert 1 <= moved < RECORDS, f"stopped mid-way, after {moved} moves"
    assert committed_records(bootstrap, name) == moved, "the main topic holds exactly the moves counted"

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_cookies([{"name": "_token", "value": tokens["viewer"], "url": base}])
    page = context.new_page()
    open_dlt_page(page, base, name)
    no_redrive_control(page)
    context.close()
    viewer = tokens["viewer"]
    trigger = request(f"{base}/api/v2/dags/{replay_dag}/dagRuns", token=viewer, body={"logical_date": None})
    assert trigger[0] == 403, "Redrive is the replay DAG's trigger: Airflow refuses it to the viewer"
    [item] = request(f"{base}/kafka-retry/api/topologies", token=viewer)[1]["topologies"]
    page_url = f"{base}/kafka-retry/api/topologies/{item['id']}/dead-letters/{name}-dlt"
    assert request(f"{page_url}/dry-run", token=viewer, body={})[0] == 403
    assert request(f"{page_url}/replays/{replay_id}/stop", token=viewer, body={})[0] == 403
    status, audit = request(f"{page_url}/replays?replay_id={replay_id}", token=tokens["admin"])
    assert status == 200, audit
    [entry] = audit["replays"]
    assert (entry["state"], entry["moved"], entry["triggered_by"]) == ("stopped", moved, "admin")
