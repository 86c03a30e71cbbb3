"""The README's main command, ``airflow-kafka-retry demo``, end to end in a subprocess, in both modes.

The retry path is the factory's one topology DAG (a task per tier behind its ``due`` branch). ``--fast``
runs it with ``airflow dags test`` (SQLite), each run's conf naming the tier it runs; without it the real
scheduler, triggerer, dag-processor and api-server run it, the topology's watcher starting the runs, here
with ``--postgres`` (the metadata DB on a private PostgreSQL server). Either way the demo uses the embedded
broker, fixes the bug, replays the DLT with the replay DAG and ends with the account. Checked: it exits 0;
every order is in exactly one final place, the one its fate calls for, and the places add up to
the orders read back from the topic (none unaccounted for, none handled successfully twice); the live
table shows each tier's task and the runs it ran in (a fast run ran just the tasks its conf named); the XCom
run summaries agree with the service's books; no record was handled before its due time; the PNG
exists and is a real picture; the data it was drawn from equals the table's counts; the lineage graph
drawn from the OpenLineage events has the flow's hops, and the StatsD counters the graph's; no Airflow
(or PostgreSQL) process of the demo outlives it, also when it is stopped mid-run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from airflow_kafka_retry.demo.account import AFTER_REPLAY, PROCESSED
from airflow_kafka_retry.demo.orders import fate

from tests.support.demo_processes import listening, processes_with, processes_with_cmdline

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

ORDERS = 80  # every fate, two CHF (bug) orders among them; the README's 200 change no path
#: Where each fate must end.
EXPECTED_PLACE = {
    "ok": f"{PROCESSED} on orders",
    "flaky": f"{PROCESSED} on orders-retry-1",
    "slow-flaky": f"{PROCESSED} on orders-retry-2",
    "bug": f"{PROCESSED} {AFTER_REPLAY}",
    "invalid": "orders-validation-dlt",
    "undecodable": "orders-parking",
}


MODES = ("fast", "scheduler")
VIEW_PNG = "retry-tiers-view.png"  # the scheduler demo's picture of its Retry tiers view (--screenshot)


@pytest.fixture(scope="module")
def demo_processes(tmp_path_factory, kafka_bootstrap):
    """Both demos, started together (each its own Airflow home and ports): the suite waits for the longer one,
    not for both in turn. The fast one on its own embedded broker; the scheduler one on the suite's broker,
    whose topics (``orders-demo-<id>``) the test reads afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__", "AKR_"))}
    started = {}
    for mode in MODES:
        out = tmp_path_factory.mktemp(f"demo-{mode}")
        command = [
            str(Path(sys.executable).with_name("airflow-kafka-retry")),
            "demo",
            *(
                ["--fast"]
                if mode == "fast"
                else ["--bootstrap", kafka_bootstrap, "--postgres", "--screenshot", str(out / VIEW_PNG)]
            ),
            "--orders",
            str(ORDERS),
            "--out",
            str(out),
        ]
        stdout, stderr = open(out / "stdout.txt", "w"), open(out / "stderr.txt", "w")
        started[mode] = (
            out,
            subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, text=True),
            stdout,
            stderr,
        )
    yield started
    for _, proc, stdout, stderr in started.values():
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        stdout.close()
        stderr.close()


#: On a broker it did not start (``--bootstrap``, as the scheduler demo here) the demo names its topics
#: ``orders-demo-<6 hex>``, not ``orders``, so as never to touch a real ``orders``: read as ``orders``.
DEMO_TOPIC = re.compile(r"\borders-demo-[0-9a-f]{6}")


def _read(out: Path, name: str) -> dict:
    """A JSON file the demo wrote, with its topic named ``orders`` whatever broker it ran on."""
    return json.loads(DEMO_TOPIC.sub("orders", (out / name).read_text()))


def _drained(out: Path) -> dict[str, float]:
    """The ``tier.drained`` StatsD counters the demo's Airflow sent, by tier (topic named ``orders``)."""
    from airflow_kafka_retry.demo.statsd_sink import counter_totals

    return {
        DEMO_TOPIC.sub("orders", t): n
        for t, n in counter_totals(out / "metrics.statsd")["tier.drained"].items()
    }


@pytest.fixture(scope="module", params=MODES)
def demo_run(request, demo_processes):
    return _finished(demo_processes, request.param)


def _finished(demo_processes, mode: str) -> tuple[Path, subprocess.CompletedProcess]:
    out, proc, stdout, stderr = demo_processes[mode]
    try:
        proc.wait(1100)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(60)
    stdout.flush()
    stderr.flush()
    done = subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        DEMO_TOPIC.sub("orders", (out / "stdout.txt").read_text()),
        (out / "stderr.txt").read_text(),
    )
    return out, done


def test_sigterm_mid_run_stops_airflow_postgresql_and_the_broker(demo_processes, tmp_path):
    """Stopped while the scheduler runs the tiers: exit code 130, no Airflow process, PostgreSQL server or
    broker left. One run on Apache Kafka (``--kafka``: the demo starts its JVM from the jars) with
    ``--postgres``, so every kind of process the demo starts is there when the signal comes (the embedded
    broker's stop, the same ``with`` unwinding, is checked on the fast demo's exit).

    The module's two demos (``demo_processes``) are started first and run meanwhile, in their own Airflow
    homes, ports and topics: the module waits for the longest demo, not for it and then this one."""
    # 20 orders: enough for the scheduler to be running the tiers when the signal comes
    command = [
        str(Path(sys.executable).with_name("airflow-kafka-retry")),
        *("demo", "--kafka", "--postgres", "--orders", "20", "--out", str(tmp_path)),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__", "AKR_"))}
    log = tmp_path / "stdout.txt"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            # a guard against a hang, within the 1200 s (Airflow took 380 s to start at a load of 65)
            deadline = time.monotonic() + 1000
            while not re.search(r"orders produced: 20\b", log.read_text(errors="replace")):
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
                time.sleep(1)
            output = log.read_text(errors="replace")
            broker = re.search(r"Apache Kafka \S+ at (\S+)", output).group(1)
            port = int(broker.rsplit(":", 1)[1])
            assert listening(port), f"nothing listens on {broker} while the demo runs"
            [pg] = re.findall(POSTGRES_PID, " ".join(output.split()))
            assert Path(f"/proc/{pg}").exists(), "PostgreSQL is not running while the demo runs"
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = log.read_text(errors="replace")
    assert code == 130, output[-3000:]
    assert "interrupted: Airflow and the broker were stopped" in output
    assert processes_with(f"AIRFLOW_HOME={tmp_path / 'airflow'}".encode()) == []
    assert not Path(f"/proc/{pg}").exists(), "PostgreSQL outlived the stopped demo"
    assert listening(port) == [], f"the demo's broker ({broker}) outlived the demo"


#: The demo's line naming its private PostgreSQL server (whitespace folded: rich may wrap it).
POSTGRES_PID = r"PostgreSQL metadata DB: a private server at 127\.0\.0\.1:\d+ \(pid (\d+)\)"


def test_demo_exits_cleanly_and_leaves_no_process(demo_run):
    out, done = demo_run
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "Reconciled:" in done.stdout
    if "--fast" not in done.args:
        assert "Airflow UI: http://127.0.0.1:" in done.stdout
    if "--postgres" in done.args:
        [pid] = re.findall(POSTGRES_PID, done.stdout)
        assert not Path(f"/proc/{pid}").exists(), "PostgreSQL outlived the demo"
    if "--bootstrap" not in done.args:  # the fast demo: the embedded broker it started is gone too
        broker = re.search(r"broker \(Tansu, memory only\) at (\S+)", done.stdout).group(1)
        assert listening(int(broker.rsplit(":", 1)[1])) == [], (
            f"the embedded broker ({broker}) outlived the demo"
        )
        assert processes_with_cmdline(f"tcp://{broker}".encode()) == [], (
            "the embedded broker outlived the demo"
        )
    assert processes_with(f"AIRFLOW_HOME={out / 'airflow'}".encode()) == [], (
        "an Airflow process outlived the demo"
    )


#: A row of the demo's live table: tier, task, delay, runs (▶: one going), drained.
TIER_ROW = re.compile(r"│ (orders\S*) +│ (\w+) +│ +\w+ │ +(\d+)(?: ▶)? │ +(\d+) │")


def test_the_live_table_shows_each_tier_as_its_task_of_the_topology_dag(demo_run):
    """Each tier's row names its task (``main``, ``retry_1``, ``retry_2``); by the end every tier's task has
    run and drained records."""
    _, done = demo_run
    rows = TIER_ROW.findall(done.stdout)
    last = {tier: (task, int(runs), int(drained)) for tier, task, runs, drained in rows}  # the last table
    assert {tier: task for tier, (task, _, _) in last.items()} == {
        "orders": "main",
        "orders-retry-1": "retry_1",
        "orders-retry-2": "retry_2",
    }, done.stdout[-6000:]
    for tier, (_, runs, drained) in last.items():
        assert runs >= 1, (tier, runs, drained)
        assert drained >= 1, (tier, runs, drained)
    assert last["orders"][1] >= 2, "the main topic runs again for the replayed orders"


def test_each_fast_run_runs_only_the_tasks_its_conf_names(demo_processes):
    """``airflow dags test --conf '{"lanes": [...]}'`` reaches the ``due`` branch: each run of the topology
    DAG ran exactly the tasks its conf named (the setup first, then a tier or the DLT watch), the others
    skipped."""
    import sqlite3
    from contextlib import closing

    out, done = _finished(demo_processes, "fast")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    with closing(sqlite3.connect(out / "airflow" / "airflow.db")) as con:
        confs = dict(con.execute("SELECT run_id, conf FROM dag_run WHERE dag_id = 'kafka_retry__orders'"))
        states = con.execute(
            "SELECT run_id, task_id, state FROM task_instance WHERE dag_id = 'kafka_retry__orders'"
        ).fetchall()
    ran: dict[str, set[str]] = {run_id: set() for run_id in confs}
    for run_id, task_id, state in states:
        assert state in ("success", "skipped"), (run_id, task_id, state)
        if state == "success":
            ran[run_id].add(task_id)
    named = {run_id: set(json.loads(conf)["lanes"]) for run_id, conf in confs.items()}
    assert ran == named
    lanes = [sorted(named[run_id]) for run_id in sorted(named)]
    assert lanes[0] == ["ensure_topics"]
    assert {"main", "retry_1", "retry_2", "watch_dlt"} <= {lane for [lane] in lanes[1:]}


def test_the_scheduler_demo_pictures_its_own_retry_tiers_view(demo_processes):
    """``--screenshot``: the view of the demo's own Airflow, taken while records wait in a retry tier."""
    out, done = _finished(demo_processes, "scheduler")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    png = out / VIEW_PNG
    assert f"picture of the Retry tiers view: {png}" in " ".join(done.stdout.split())  # as rich wrapped it
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert width == 1400, "the demo's viewport width"
    assert height >= 1000, "the full page, at least the viewport's height"
    assert png.stat().st_size > 50_000, "a page with tiers and dead letters, not an empty one"


def test_screenshot_needs_the_scheduler_demo(tmp_path):
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("airflow-kafka-retry")),
            *("demo", "--fast", "--screenshot", str(tmp_path / "v.png"), "--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "--screenshot needs the scheduler demo (no --fast)" in done.stdout
    assert not (tmp_path / "v.png").exists()


def test_every_order_is_in_exactly_the_place_its_fate_calls_for(demo_run):
    out, done = demo_run
    account = _read(out, "account.json")
    produced = _read(out, "produced.json")
    # produced.json is what was read back from the topic afterwards, not what the producer meant to write
    assert account["produced"] == len(produced) == account["intended"] == ORDERS
    assert sorted(map(int, produced)) == list(range(ORDERS))
    assert account["unaccounted"] == {}
    assert account["written_twice"] == {}
    assert account["strangers"] == []
    assert account["placed"] == sum(account["final"].values()) == ORDERS
    assert account["reconciles"] is True
    assert f"Reconciled: {ORDERS} of {ORDERS} orders read back from the topic" in done.stdout
    assert account["handled_twice"] == 0, "an order was handled successfully more than once"
    fates = Counter(fate(int(i)) for i in produced)
    expected: dict[str, dict[str, int]] = {}
    for kind, n in fates.items():
        expected.setdefault(EXPECTED_PLACE[kind], {})[kind] = n
    got = {place: {k: n for k, n in row.items() if n} for place, row in account["by_fate"].items()}
    assert got == expected
    assert account["xcom_succeeded"] == account["books_succeeded"]
    assert (
        account["books_succeeded"]["orders"] == fates["ok"] + fates["bug"]
    )  # the replayed ones on main again
    for topic, late in account["lateness"].items():
        assert late["handled"] > 0, (topic, late)
        assert late["early"] == 0, (topic, late)
    for place, count in account["final"].items():  # the printed table shows the same
        assert any(place in line and f" {count} " in line for line in done.stdout.splitlines()), (
            place,
            count,
        )


def test_the_picture_is_drawn_from_the_table_counts(demo_run):
    out, _ = demo_run
    png = out / "flow.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 400
    assert pixels.shape[1] > 600
    assert pixels[..., :3].std() > 0.05, "a blank picture"
    data = _read(out, "flow.json")
    account = _read(out, "account.json")
    assert data["final"] == account["final"]
    assert data["produced"] == account["produced"]
    inflow = Counter()
    for _, target, n in data["edges"]:
        inflow[target] += n
    processed = sum(n for place, n in account["final"].items() if place.startswith(PROCESSED))
    assert inflow[PROCESSED] == processed
    for place in ("orders-validation-dlt", "orders-parking"):
        assert inflow[place] == account["final"][place]
    assert data["nodes"]["orders"]["orders"] == ORDERS
    assert data["lateness"] == account["lateness"]


def test_the_demo_airflow_reports_lineage_and_metrics_with_the_flow_counts(demo_run):
    """The demo's Airflow sends metrics (StatsD) and OpenLineage events (file transport) with its own
    settings; the lineage graph's topic-to-topic counts are the flow's, and the drained counters the XCom
    summaries'."""

    out, _ = demo_run
    png = out / "lineage.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000
    lineage = _read(out, "lineage.json")
    flow = {(a, b): n for a, b, n in _read(out, "flow.json")["edges"]}
    edges = {(a, b): n for a, b, n in lineage["edges"]}
    assert lineage["namespace"].startswith("kafka://127.0.0.1:")
    assert lineage["runs"]["dlt_replay"] >= 1
    assert lineage["runs"]["tier_run"] >= 3
    # first passes through the tiers: each hop the orders made is a hop the lineage counted
    for hop in [
        ("orders", "orders-retry-1"),
        ("orders-retry-1", "orders-retry-2"),
        ("orders-retry-2", "orders-dlt"),
        ("orders", "orders-validation-dlt"),
        ("orders", "orders-dlt"),
    ]:
        assert edges[hop] == flow[hop], (hop, edges, flow)
    # the replay moved the DLT's records back to orders; those that fail again are parked from there
    assert (
        edges[("orders-dlt", "orders")]
        == flow[("orders-dlt", "orders-parking")] + flow[("orders-dlt", PROCESSED)]
    )
    assert edges[("orders", "orders-parking")] == flow[("orders-dlt", "orders-parking")]
    drained = _drained(out)
    for tier in ("orders", "orders-retry-1", "orders-retry-2"):
        assert drained[tier] == sum(n for (a, _), n in edges.items() if a == tier), (tier, drained, edges)


def test_the_flow_and_the_metrics_match_the_topics_read_back(demo_processes, kafka_bootstrap):
    """An independent read of the scheduler demo's topics on the suite's broker (the flow and the account come
    from one object, the StatsD counters and the lineage from one summary): each DLT holds the records the
    flow sent there, parking and the validation DLT the orders finally there, and each tier's drained
    counter is the number of records on its topic (every tier drained to its end by the demo's end)."""

    from tests.support.ledger import read_all

    out, done = _finished(demo_processes, "scheduler")
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    [topic] = set(DEMO_TOPIC.findall((out / "flow.json").read_text()))  # its topic on the suite's broker
    data = _read(out, "flow.json")
    suffixes = ("", "-retry-1", "-retry-2", "-dlt", "-validation-dlt", "-parking")
    on = {f"orders{s}": read_all(kafka_bootstrap, f"{topic}{s}") for s in suffixes}
    inflow = Counter()
    for _, target, n in data["edges"]:
        inflow[target] += n
    for dlt in ("orders-dlt", "orders-validation-dlt"):
        assert inflow[dlt] == len(on[dlt]), (dlt, inflow, {t: len(m) for t, m in on.items()})
    assert data["final"]["orders-validation-dlt"] == len({m.key() for m in on["orders-validation-dlt"]})
    assert data["final"]["orders-parking"] == len({m.key() for m in on["orders-parking"]})
    assert len({m.key() for m in on["orders"]}) == data["produced"] == ORDERS
    drained = _drained(out)
    for tier in ("orders", "orders-retry-1", "orders-retry-2"):
        assert drained[tier] == len(on[tier]), (tier, drained, {t: len(m) for t, m in on.items()})
