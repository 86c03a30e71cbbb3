"""The "Retry tiers" view in a real Airflow API server, loaded in headless Chromium (system browser via
Playwright).

The API server runs with the plugin (registered by this package's entry point), the simple auth
manager with an admin and a viewer (restricted per DAG by tests/support/restricted_auth_manager.py:
the viewer may not read a second topology's tier DAG, nor the XComs of the first one's tier 1), and
the embedded broker holding records in the tiers and the DLT. The page's DLT counts are checked
against an independent read of the DLT (a plain consumer counting the exception headers), "Run now"
triggers the tier DAG through Airflow's REST API with the admin's login, the viewer gets a read-only
page without run summaries and without the topology it may not read. Then a DLT's page
(tests/support/view_redrive.py): the admin filters, dry-runs, redrives at a low rate, watches the progress and
stops the replay mid-way; the viewer sees no redrive control and gets 403 from the redrive and stop endpoints.
Screenshots are kept as test artifacts (``.artifacts/retry-tiers-view.png``, ``retry-tiers-redrive.png``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from airflow_kafka_retry.policy.headers.codec import BACKOFF_TIMESTAMP, encode_big_integer
from airflow_kafka_retry.sandbox.airflow_stack import seed_metadata_db
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic

from tests.support import view_redrive
from tests.support.warm_airflow import run_airflow

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.browser]

REPO = Path(__file__).parents[2]
ARTIFACTS = REPO / ".artifacts"
PASSWORDS = {"admin": secrets.token_hex(8), "viewer": secrets.token_hex(8)}
DAG_FILE = '''
"""Written by tests/integration/test_view_page.py: the factory's tier DAGs and the replay DAG."""
from airflow_kafka_retry import build_dlt_replay_dag, build_retry_dags

TOPOLOGY = {topology!r}
globals().update(build_retry_dags(TOPOLOGY, handler="tests.support.view_handler:accept", dlt_watch=False,
                                  layout="tiers", default_args={{"retries": 0}}))
replay = build_dlt_replay_dag(TOPOLOGY)
# a second topology, whose tier DAG the viewer may not read
globals().update(build_retry_dags({hidden!r}, handler="tests.support.view_handler:accept", dlt_watch=False,
                                  layout="tiers"))
'''


def chromium_path() -> str | None:
    return next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(
    url: str, *, token: str | None = None, body: dict | None = None, method: str | None = None
) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, {"detail": exc.read().decode(errors="replace")}


@pytest.fixture
def topology_on_broker(kafka_bootstrap, tmp_path):
    name = unique_topic("view")
    topics = [name, f"{name}-retry-1", f"{name}-retry-2", f"{name}-dlt"]
    create_topics(kafka_bootstrap, topics, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    now = int(time.time() * 1000)
    due = [now - 5_000] * 4 + [
        now + 20 * 60_000
    ] * 3  # 4 due now (drained by a real run), 3 due within the hour
    for i, due_ms in enumerate(due):
        producer.produce(
            f"{name}-retry-1",
            b'{"order": 1}',
            partition=i % 2,
            headers=[(BACKOFF_TIMESTAMP, encode_big_integer(due_ms))],
        )
    for cls, n in (("myapp.errors.InvalidOrder", 3), ("java.lang.IllegalStateException", 2)):
        for i in range(n):
            # the InvalidOrder ones say where they failed, as Spring's retry topics write it
            original = [
                ("kafka_original-topic", name.encode()),
                ("kafka_original-partition", (i % 2).to_bytes(4, "big")),
                ("kafka_original-offset", (100 + i).to_bytes(8, "big")),
            ]
            producer.produce(
                f"{name}-dlt",
                b'{"order": 2}',
                partition=i % 2,
                headers=[
                    *(original if cls.endswith("InvalidOrder") else []),
                    ("kafka_exception-fqcn", cls.encode()),
                ],
            )
    assert producer.flush(15) == 0
    yield name
    delete_topics(
        kafka_bootstrap, [*topics, f"{name}-parking"]
    )  # the tier DAG's ensure_topics made the parking topic


@pytest.fixture
def api_server(tmp_path, kafka_bootstrap, topology_on_broker):
    name = topology_on_broker
    home = tmp_path / "airflow"
    dags = home / "dags"
    (dags / "topologies").mkdir(parents=True)
    topology = dags / "topologies" / "orders.yaml"
    topology.write_text(f"topic: {name}\ngroup_id: svc\nattempts: 3\nbackoff: {{kind: fixed, delay: 30s}}\n")
    hidden = dags / "topologies" / "payments.yaml"
    hidden.write_text(f"topic: {name}-pay\ngroup_id: svc\nattempts: 2\n")
    (dags / "retry_tiers.py").write_text(DAG_FILE.format(topology=str(topology), hidden=str(hidden)))
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.support.restricted_auth_manager.RestrictedAuthManager",
            "KAFKA_RETRY_TEST_DENIED": json.dumps(
                {
                    "viewer": {
                        "dags": [f"kafka_retry__{name}-pay-retry-1"],
                        "xcom": [f"kafka_retry__{name}-retry-1"],
                    }
                }
            ),
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {"bootstrap.servers": kafka_bootstrap, "sasl.password": "never-in-the-browser"},
                }
            ),
            # a DLT page's Stop writes with its own connection (the replay role's principal; the broker
            # here has no auth, so any connection works): without it the page has no Stop
            "AIRFLOW_CONN_KAFKA_REPLAY": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
            ),
            "AIRFLOW__KAFKA_RETRY__REDRIVE_KAFKA_CONN_ID": "kafka_replay",
            "AIRFLOW__KAFKA_RETRY__TIMEOUT": "10",
            "AIRFLOW__KAFKA_RETRY__LAYOUT": "tiers",  # the view finds a DAG per tier
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        }
    )
    airflow = str(Path(sys.executable).with_name("airflow"))
    # one real run of the first tier's DAG: it drains the 4 due records, so the view has a run summary to show
    seed_metadata_db(env, cwd=REPO)
    for args in (
        ["dags", "reserialize"],
        ["dags", "test", f"kafka_retry__{name}-retry-1"],
    ):
        done = run_airflow(env, *args, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(
        [airflow, "api-server", "--port", str(port), "--host", "127.0.0.1"],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5):
                    break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("the API server did not start: " + (tmp_path / "api-server.log").read_text()[-3000:])
        yield {"base": base, "topic": name, "log": tmp_path / "api-server.log", "env": env}
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


def dead_letters_by_class(bootstrap: str, topic: str) -> Counter[str]:
    """The DLT's records by exception class, read by a plain consumer from each partition's start to its end.

    The end is the partition EOF event, as the engine finds it (not a ListOffsets request, whose high
    watermark some brokers get wrong).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-test-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    counts: Counter[str] = Counter()
    try:
        waiting = set(consumer.list_topics(topic, timeout=15).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in waiting])
        while waiting:
            message = consumer.poll(15)
            assert message is not None, f"{topic}: partitions {sorted(waiting)} did not reach their end"
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(message.error())
                waiting.discard(message.partition())
                continue
            headers = dict(message.headers() or [])
            counts[headers.get("kafka_exception-fqcn", b"unknown").decode()] += 1
    finally:
        consumer.close()
    return counts


def token(base: str, user: str) -> str:
    status, body = _request(f"{base}/auth/token", body={"username": user, "password": PASSWORDS[user]})
    assert status == 201, body
    return body["access_token"]


def test_view_through_the_api_server_and_a_browser(api_server, kafka_bootstrap):
    chromium = chromium_path()
    if chromium is None:
        pytest.fail("no chromium on PATH: scripts/test installs Debian's chromium package (as root)")
    from playwright.sync_api import sync_playwright

    base, name = api_server["base"], api_server["topic"]
    admin, viewer = token(base, "admin"), token(base, "viewer")
    # the JSON endpoints are behind Airflow's login
    status, _ = _request(f"{base}/kafka-retry/api/topologies")
    assert status == 401
    status, listing = _request(f"{base}/kafka-retry/api/topologies", token=viewer)
    assert status == 200, listing
    [item] = listing["topologies"]  # not the second topology: the viewer may not read its tier DAG
    assert item["topic"] == name
    _, admin_listing = _request(f"{base}/kafka-retry/api/topologies", token=admin)
    assert [t["topic"] for t in admin_listing["topologies"]] == [name, f"{name}-pay"]
    hidden = admin_listing["topologies"][1]["id"]
    assert _request(f"{base}/kafka-retry/api/topologies/{hidden}", token=viewer)[0] == 404  # as a missing id
    assert listing["patterns"] == [], "the patterns (the DAGs folder's path) are only for admins"
    assert admin_listing["patterns"], "an admin sees the patterns"
    assert _request(f"{base}/kafka-retry/api/topologies/{hidden}", token=admin)[0] == 200
    _, viewer_view = _request(f"{base}/kafka-retry/api/topologies/{item['id']}", token=viewer)
    assert [t["can_trigger"] for t in viewer_view["tiers"]] == [False, False, False], (
        "a viewer may not trigger"
    )
    [viewer_run] = viewer_view["tiers"][1]["runs"]
    assert viewer_run["state"] == "success", "no XCom access, no summary"
    assert viewer_run["summary"] is None, "no XCom access, no summary"
    # what the broker holds, read independently of the view
    dlt_counts = dead_letters_by_class(kafka_bootstrap, f"{name}-dlt")
    assert dlt_counts == {"myapp.errors.InvalidOrder": 3, "java.lang.IllegalStateException": 2}

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            for user, tok in (("admin", admin), ("viewer", viewer)):
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                context.add_cookies([{"name": "_token", "value": tok, "url": base}])
                page = context.new_page()
                page.goto(f"{base}/kafka-retry/")
                page.wait_for_selector("body[data-loaded=true]", timeout=60_000)
                page.screenshot(path=str(ARTIFACTS / f"retry-tiers-view-{user}.png"), full_page=True)
                tier1 = page.locator(f'section[data-topic="{name}-retry-1"]')
                assert tier1.locator(f'[data-backlog="{name}-retry-1"]').inner_text() == "3"
                assert tier1.locator('[data-due="now"]').inner_text() == "0"
                assert tier1.locator('[data-due="hour"]').inner_text() == "3"
                [committed_0, committed_1] = [
                    tier1.locator(f'tr[data-partition="{p}"] td').nth(1).inner_text() for p in (0, 1)
                ]
                assert (committed_0, committed_1) == ("2", "2"), "the run committed past the due records"
                last_run = tier1.locator("tbody tr").last
                assert last_run.locator("td").nth(1).inner_text() == "success"
                drained = last_run.locator("td").nth(2).inner_text()
                if user == "admin":
                    assert drained == "4", "the run's summary (XCom) is shown"
                else:
                    assert drained == "—", "a user who may not read the tier DAG's XComs sees no summary"
                assert page.locator(f'[data-backlog="{name}-retry-2"]').inner_text() == "0"
                dlt = page.locator(f'section[data-topic="{name}-dlt"]')
                assert dlt.locator(f'[data-dead-total="{name}-dlt"]').inner_text() == str(dlt_counts.total())
                for cls, n in dlt_counts.items():
                    assert dlt.locator(f'[data-exception-count="{cls}"]').inner_text() == str(n)
                # the newest records (all 5): their family, and where they failed when the headers say so
                samples = dlt.locator("tr[data-sample]")
                assert samples.count() == 5
                shown = [
                    tuple(
                        samples.nth(i).locator(f"[data-sample-{c}]").inner_text()
                        for c in ("family", "origin")
                    )
                    for i in range(5)
                ]
                assert {family for family, _ in shown} == {"spring-retry-topic"}
                assert sorted(origin for _, origin in shown) == sorted(
                    [f"{name}[{i % 2}]@{100 + i}" for i in range(3)] + ["—", "—"]
                )
                assert dlt.locator('[data-family-count="spring-retry-topic"]').inner_text() == (
                    "spring-retry-topic 5"
                )
                assert "never-in-the-browser" not in page.content()
                run_now = tier1.get_by_role("button", name="Run now")
                if user == "viewer":
                    assert run_now.is_disabled()
                    assert dlt.get_by_role("button", name="Replay").first.is_disabled()
                else:
                    page.screenshot(path=str(ARTIFACTS / "retry-tiers-view.png"), full_page=True)
                    run_now.click()
                    page.wait_for_function(
                        "document.querySelector('#status').textContent.startsWith('triggered')",
                        timeout=60_000,
                    )
                    # Replay on the InvalidOrder group: the form is pre-filled, dry run on, and triggers the
                    # replay DAG
                    dlt.locator('tr[data-exception="myapp.errors.InvalidOrder"]').get_by_role(
                        "button", name="Replay"
                    ).click()
                    form = page.locator("#replay-form")
                    assert (
                        form.locator('input[name="exception"]').input_value() == "myapp.errors.InvalidOrder"
                    )
                    assert form.locator('input[name="dlt"]').input_value() == f"{name}-dlt"
                    assert form.locator('input[name="dry_run"]').is_checked()
                    form.get_by_role("button", name="Trigger replay").click()
                    page.wait_for_function(
                        "document.querySelector('#replay-result').textContent.startsWith('triggered')",
                        timeout=60_000,
                    )
                context.close()
            # the clicks created runs through Airflow's REST API: the tier DAG's second run, a dry-run replay
            status, runs = _request(f"{base}/api/v2/dags/kafka_retry__{name}-retry-1/dagRuns", token=admin)
            assert status == 200, runs
            assert runs["total_entries"] == 2, runs
            status, replays = _request(f"{base}/api/v2/dags/kafka_dlt_replay__{name}/dagRuns", token=admin)
            assert status == 200, replays
            assert replays["total_entries"] == 1, replays
            assert replays["dag_runs"][0]["conf"] == {
                "dlt": f"{name}-dlt",
                "dry_run": True,
                "exception": "myapp.errors.InvalidOrder",
            }
            # issue 51's flow on the DLT's page: filter, dry run, redrive at a low rate, progress, stop
            view_redrive.redrive_flow(
                browser,
                api_server,
                kafka_bootstrap,
                tokens={"admin": admin, "viewer": viewer},
                request=_request,
                screenshot=str(ARTIFACTS / "retry-tiers-redrive.png"),
            )
        finally:
            browser.close()
    assert (ARTIFACTS / "retry-tiers-view.png").stat().st_size > 10_000
