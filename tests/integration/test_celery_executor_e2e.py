"""End to end with the CeleryExecutor: a Celery worker SIGKILLed mid-drain, the task retried on the other.

A real deployment: api-server, scheduler, dag-processor and triggerer, the CeleryExecutor with a private
Redis as broker (``testkit/redis_server.py``), Celery's result backend and Airflow's metadata DB on a
private PostgreSQL, and two ``airflow celery worker`` processes (``testkit/airflow_celery.py``), each
naming itself (``[core] hostname_callable``) so the task instance's ``hostname`` says which ran a try.
The topology (tiers of 5 s and 10 s) runs as its one event-driven DAG; the DAG's ``main`` task plays the
failing service (every record fails there once). Records are produced four a second, then one a second
after the first 40, until the kill: a stream, so a next wave of retry-1 records always comes (with a fixed
40, a ``retry_1`` try that starts late on a loaded machine can take every record in one wave, its
partitions' batches announced side by side before any is handled, and leave no later batch to kill
in). The handler sleeps on the retry tiers, announcing each batch first
(``tests/support/slow_timed_handler.py``).

As soon as a first try of ``retry_1`` announces a new batch after retry-1 records were handled (so there
is a before and an after), the worker running it is SIGKILLed with every
process it forked (the task process in its own process group included: a lost machine), and the test
checks none of them is left; the stream stops. Airflow learns of it only through the missing heartbeats
(``[scheduler] task_instance_heartbeat_timeout``, 20 s here): the try is failed, and the next one runs
on the other worker.

Checked: the task's first try ran on the killed worker and its last, successful try on the other (the try
history and the ``hostname`` column); the batch the killed try had announced was handled again on the
other worker (by the retried try, or by a later run's ``retry_1`` that the scheduler started first: the
killed try holds the task's one slot, ``max_active_tis_per_dag=1``, until it is failed); the killed try
handled nothing after the kill; every record ends exactly once (each tier topic and the DLT hold it
once, ``read_committed``; its handling path follows its script); none is handled before it is due; no
task failed for good; no password (Redis, PostgreSQL) is on any process's command line. Reported, not
asserted (timing): the start-up times, and the lateness of the records handled before the kill, of those
due while the killed try held the task, of those due after, and of each wave after the kill.
"""

from __future__ import annotations

import json
import statistics
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from testkit.airflow_celery import CeleryWorkers, alive, celery_env
from testkit.redis_server import RedisServer

from tests.support import ledger
from tests.support.timed_airflow import timed_airflow_env
from tests.support.timed_stream import read_ledger, scripted

# the timeout bounds the Airflow start, ensure_topics and the three waits, each with its own bound
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).parents[2]

PARTITIONS = 2
COUNT = 40  # records produced RATE a second, then one a second until the kill
RATE = 4.0
COUNT_MAX = 400  # the stream's end if no kill came (the wait for a batch to kill fails first)
DELAYS_S = (5, 10)
BATCH_SLEEP_S = 3  # each retry-tier batch: a window to kill its worker in
HEARTBEAT_TIMEOUT_S = 20  # [scheduler] task_instance_heartbeat_timeout (default 300 s)
WORKERS = ("worker-a", "worker-b")
WAIT_S = 300  # each wait's liveness bound (not a speed target: a loaded 2-core machine needs room)

DAG_FILE = '''
"""Written by tests/integration/test_celery_executor_e2e.py."""
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags
from tests.support.slow_timed_handler import record_notification

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.slow_timed_handler:handle",
    include_main=True,
    on_dlt=[record_notification],
    dag_id_template="cel__{{topic}}",
    options={{"batch_size": 50}},
    default_args={{"retries": 2, "retry_delay": timedelta(seconds=2)}},
))
'''


def _late(e: dict) -> float:
    return (e["handled_ms"] - e["due_ms"]) / 1000


def _produce_until(
    stop: threading.Event, bootstrap: str, topic: str, records: dict[str, int], produced: list[str | None]
) -> None:
    """
    Produce ``records`` RATE a second (one a second after COUNT), round-robin, until ``stop`` is set.

    ``produced`` gets each id as it is produced, then None if the flush left any record undelivered.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (rid, succeed_on) in enumerate(records.items()):
        if stop.is_set():
            break
        producer.produce(
            topic,
            key=rid.encode(),
            partition=i % PARTITIONS,
            value=json.dumps({"id": rid, "succeed_on": succeed_on}).encode(),
        )
        produced.append(rid)
        producer.poll(0)
        stop.wait(1 / RATE if i < COUNT else 1.0)
    if producer.flush(60):
        produced.append(None)  # the test checks every record was delivered


def _cmdlines() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return found


def test_a_celery_worker_killed_mid_drain_and_the_task_retried_on_the_other(
    kafka_bootstrap, postgres, airflow_database_url, tmp_path, capsys, request
):
    main = unique_topic("cel")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        json.dumps(
            {
                "topic": main,
                "group_id": f"{main}-svc",
                "attempts": 3,
                "backoff": {"kind": "custom", "delays": [f"{d}s" for d in DELAYS_S]},
            }
        )
    )
    topology = load_topology(topology_file)
    create_topics(kafka_bootstrap, [main], PARTITIONS)
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, topology_topics(topology)))
    retry1, retry2 = (t.topic for t in topology.retry_tiers)
    stream = scripted(range(COUNT_MAX))
    produced: list[str | None] = []
    script: dict[str, int] = {}  # what was produced: known once the stream stopped at the kill
    timed_ledger, batch_log = tmp_path / "handled.jsonl", tmp_path / "batches.jsonl"
    dag_id = f"cel__{main}"

    def finished() -> bool:
        entries = read_ledger(timed_ledger)
        finals = {e["id"] for e in entries if e["ok"]} | {
            e["id"] for e in entries if e["topic"] == retry2 and not e["ok"]
        }
        return set(script) <= finals

    started = time.monotonic()
    marks: dict[str, float] = {}
    with RedisServer() as redis:
        redis_s = time.monotonic() - started
        home = tmp_path / "airflow"
        env = timed_airflow_env(
            home,
            bootstrap=kafka_bootstrap,
            database_url=airflow_database_url,
            timed_ledger=timed_ledger,
            notify_log=tmp_path / "notified.jsonl",
            extra={
                **celery_env(redis.url(), airflow_database_url, concurrency=2),
                "AKR_BATCH_LOG": str(batch_log),
                "AKR_BATCH_SLEEP_S": str(BATCH_SLEEP_S),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.support.hostname.from_env",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
            },
            executor="CeleryExecutor",
        )
        (home / "dags" / "cel_tiers.py").write_text(
            textwrap.dedent(DAG_FILE.format(topology=str(topology_file)))
        )
        with AirflowCluster(home, env, cwd=REPO, migrated=True, api_apps="execution") as cluster:
            airflow_s = time.monotonic() - started - redis_s
            with CeleryWorkers(
                home, env, WORKERS, cwd=REPO, worker_env={n: {"AKR_HOSTNAME": n} for n in WORKERS}
            ) as workers:
                secrets = (redis.password, postgres.password)
                leaked = [c for c in _cmdlines() if any(s in c for s in secrets)]
                assert not leaked, f"a password on a command line: {leaked}"
                cluster.wait_for_success(dag_id, WAIT_S, task_id="ensure_topics")

                stop_stream = threading.Event()
                producer = threading.Thread(
                    target=_produce_until,
                    args=(stop_stream, kafka_bootstrap, main, stream, produced),
                    daemon=True,
                )
                producer.start()

                def wait(condition, what: str, dead: tuple[str, ...] = ()) -> None:
                    deadline = time.monotonic() + WAIT_S  # a liveness bound for the event, not a speed target
                    while not condition():
                        assert time.monotonic() < deadline, (
                            f"{what}; scheduler log:\n{cluster.log_tail('scheduler')}\n"
                            f"workers: {[workers.processes[n].log_tail(20) for n in WORKERS]}"
                        )
                        cluster.check_alive()
                        workers.check_alive(skip=dead)
                        time.sleep(0.2)

                def first_try_batch() -> dict | None:
                    """A batch a first try of retry_1 announced after retry-1 records were handled."""
                    handled = [e["handled_ms"] for e in read_ledger(timed_ledger) if e["topic"] == retry1]
                    if not handled:
                        return None
                    return next(
                        (
                            b
                            for b in read_ledger(batch_log)
                            if b["topic"] == retry1
                            and b["run"].endswith("/1")
                            and b["slept"]  # a new batch: the handler sleeps before handling it
                            and b["started_ms"] > min(handled)
                        ),
                        None,
                    )

                marks["topics created"] = time.monotonic() - started
                wait(lambda: first_try_batch() is not None, "no first try of retry_1 announced a batch")
                killed_batch = first_try_batch()
                assert killed_batch is not None
                victim = killed_batch["host"]
                [survivor] = [n for n in WORKERS if n != victim]
                killed_at_ms = int(time.time() * 1000)
                marks["kill"] = time.monotonic() - started
                killed_pids = workers.kill(victim)  # returns once none of its processes is left
                gone_ms = int(time.time() * 1000)  # what the killed processes did before this, they did alive
                stop_stream.set()
                # checked here too, at once: the task process must not outlive its worker (an orphan stops
                # itself, operators/supervisor_watch.py, and would look killed a little later)
                assert killed_batch["pid"] in killed_pids, (killed_batch, killed_pids)
                assert not [pid for pid in killed_pids if alive(pid)], killed_pids
                run_id = killed_batch["run"].split("/")[1]
                producer.join(90)
                assert not producer.is_alive(), "the producer did not stop"
                assert None not in produced, "the producer left records undelivered"
                script.update((rid, stream[rid]) for rid in produced if rid is not None)

                def retried() -> bool:
                    return cluster.query(
                        "SELECT state FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                        dag_id,
                        run_id,
                        "retry_1",
                    ) == [("success",)]

                wait(finished, "not every record reached its end after the kill", dead=(victim,))
                marks["every record at its end"] = time.monotonic() - started
                wait(retried, "the killed task was not retried to success", dead=(victim,))
                marks["retried task done"] = time.monotonic() - started
                final = cluster.query(
                    "SELECT try_number, hostname FROM task_instance "
                    "WHERE dag_id = ? AND run_id = ? AND task_id = 'retry_1'",
                    dag_id,
                    run_id,
                )
                history = cluster.query(
                    "SELECT try_number, hostname, state FROM task_instance_history "
                    "WHERE dag_id = ? AND run_id = ? AND task_id = 'retry_1' ORDER BY try_number",
                    dag_id,
                    run_id,
                )
                # every try that died with the worker (a task it ran besides retry_1's too)
                died = cluster.query(
                    "SELECT task_id, run_id, try_number FROM task_instance_history "
                    "WHERE hostname = ? AND state = 'failed' ORDER BY task_id",
                    victim,
                )
                states = Counter(
                    (task, state) for task, state in cluster.query("SELECT task_id, state FROM task_instance")
                )
                ready_s = dict(workers.ready_s)
    marks["stopped"] = time.monotonic() - started
    entries = read_ledger(timed_ledger)
    batches = read_ledger(batch_log)
    tiered = [e for e in entries if e["topic"] in (retry1, retry2)]
    retaken = [
        b for b in batches if b["started_ms"] > killed_at_ms and set(killed_batch["ids"]) & set(b["ids"])
    ]
    back_ms = retaken[0]["started_ms"] if retaken else killed_at_ms
    groups = {
        "handled before the kill": [e for e in tiered if e["handled_ms"] < killed_at_ms],
        "due before the batch was taken again, handled after the kill": [
            e for e in tiered if e["handled_ms"] >= killed_at_ms and e["due_ms"] < back_ms
        ],
        "due after that": [e for e in tiered if e["due_ms"] >= back_ms],
    }
    # each wave after the kill: the records each task try (a DAG run's tier task) handled
    waves: dict[tuple[str, str], list[dict]] = {}
    for e in tiered:
        if e["handled_ms"] >= killed_at_ms:
            waves.setdefault((e["run"].split("/", 1)[1], e["topic"]), []).append(e)
    with capsys.disabled():
        print(
            f"\nCeleryExecutor: redis ready in {redis_s:.1f}s, Airflow in {airflow_s:.1f}s, "
            f"workers {ready_s}; "
            f"{victim} SIGKILLed ({len(killed_pids)} processes) while retry_1's first try ({run_id}) "
            f"handled {len(killed_batch['ids'])} record(s); heartbeat timeout {HEARTBEAT_TIMEOUT_S}s; "
            f"{len(script)} records produced"
        )
        if retaken:
            print(
                f"  the batch taken again {(retaken[0]['started_ms'] - killed_at_ms) / 1000:.1f}s "
                f"after the kill, by {retaken[0]['run']} on {retaken[0]['host']}"
            )
        print(f"  lateness (handled - due; the handler sleeps {BATCH_SLEEP_S}s on each new batch):")
        for label, group in groups.items():
            for topic in (retry1, retry2):
                late = [_late(e) for e in group if e["topic"] == topic]
                if late:
                    print(
                        f"    {topic}, {label}: p50 {statistics.median(late):.2f}s, "
                        f"max {max(late):.2f}s over {len(late)} records"
                    )
        print("  the waves after the kill (a DAG run's tier task try each):")
        for (run, topic), wave in sorted(waves.items(), key=lambda kv: min(e["handled_ms"] for e in kv[1])):
            late = [_late(e) for e in wave]
            first_s = (min(e["handled_ms"] for e in wave) - killed_at_ms) / 1000
            print(
                f"    {topic} {run}: {len(wave)} records from {first_s:.1f}s after the kill, lateness p50 "
                f"{statistics.median(late):.2f}s, max {max(late):.2f}s"
            )
        print(f"  try history of retry_1 in {run_id}: {history}; last try {final}")
        print(f"  tries failed with {victim}: {[(task, n) for task, _, n in died]}")
        print("  seconds since the start: " + ", ".join(f"{k} {v:.0f}" for k, v in marks.items()))

    # the first try ran on the killed worker, a later one on the other, and it handled the announced batch
    assert [(n, host) for n, host, _ in history if n == 1] == [(1, victim)], history
    assert ("retry_1", run_id, 1) in died, died
    assert final[0][0] >= 2, (final, history)
    assert final[0][1] == survivor, (final, history)
    assert retaken, killed_batch
    assert all(b["host"] == survivor for b in retaken), (retaken, killed_batch)
    assert set(killed_batch["ids"]) <= {i for b in retaken for i in b["ids"]}, (retaken, killed_batch)
    # the killed try handled nothing after the kill (its task process died with the worker)
    late_first = [e for e in entries if e["run"] == killed_batch["run"] and e["handled_ms"] > gone_ms]
    assert not late_first, late_first
    assert not [b for b in batches if b["pid"] in killed_pids and b["started_ms"] > gone_ms]
    # every record ends exactly once: each tier topic and the DLT hold it once (read_committed)
    expect = {
        retry1: sorted(script),
        retry2: sorted(rid for rid, n in script.items() if n != 2),
        topology.dlt_topic: sorted(rid for rid, n in script.items() if n == 0),
    }
    for topic, ids in expect.items():
        keys = sorted(m.key().decode() for m in ledger.read_all(kafka_bootstrap, topic))
        assert keys == ids, (topic, Counter(keys) - Counter(ids), Counter(ids) - Counter(keys))
    # each record's handling follows its script (a batch handled but not committed by a killed try would
    # be handled again: only the distinct steps are compared)
    by_id: dict[str, list[tuple]] = {}
    for e in entries:
        by_id.setdefault(e["id"], []).append((e["topic"], e["attempt"], e["ok"]))
    for rid, succeed_on in script.items():
        want = [(main, 1, False), (retry1, 2, succeed_on == 2)]
        if succeed_on != 2:
            want.append((retry2, 3, succeed_on == 3))
        assert list(dict.fromkeys(by_id[rid])) == want, (rid, by_id[rid])
    assert not [e for e in tiered if e["handled_ms"] < e["due_ms"]], "handled before their due time"
    assert not [k for k in states if k[1] == "failed"], dict(states)
