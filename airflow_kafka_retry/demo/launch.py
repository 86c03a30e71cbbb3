"""
The demo from start to end: its broker, its metadata DB, the course, and what it leaves behind.

The course is :class:`~airflow_kafka_retry.demo.run.Demo`; it leaves the account, the flow picture, the
lineage graph and the metrics. Everything started is stopped on the way out, on errors, Ctrl-C and
SIGTERM too.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from airflow_kafka_retry.demo.commands import DemoError
from airflow_kafka_retry.demo.deployment import LINEAGE_DIR, METRICS_FILE, Deployment, prepare
from airflow_kafka_retry.demo.lineage_graph import draw_lineage, lineage_edges, read_events
from airflow_kafka_retry.demo.picture import draw, flow_data
from airflow_kafka_retry.demo.report import print_account
from airflow_kafka_retry.demo.run import Demo
from airflow_kafka_retry.demo.statsd_sink import StatsdSink, counter_totals


def run_demo(
    *,
    bootstrap: str | None,
    orders: int,
    partitions: int,
    fast: bool,
    out_dir: Path | None,
    kafka: bool = False,
    console: Console | None = None,
    postgres: bool = False,
    screenshot: Path | None = None,
) -> int:
    """The whole demo; returns the process exit code (0: the account reconciles)."""
    console = console or Console(width=None if sys.stdout.isatty() else 132)
    if importlib.util.find_spec("matplotlib") is None:
        console.print(
            "[bold red]demo failed:[/] the picture needs matplotlib: pip install 'airflow-kafka-retry[demo]'"
        )
        return 1
    if screenshot is not None:
        from airflow_kafka_retry.demo.screenshot import ScreenshotError, check_ready

        if fast:
            console.print("[bold red]demo failed:[/] --screenshot needs the scheduler demo (no --fast)")
            return 1
        try:
            check_ready()
        except ScreenshotError as exc:
            console.print(f"[bold red]demo failed:[/] {exc}")
            return 1
        screenshot = screenshot.resolve()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root = (out_dir or Path.cwd() / ".artifacts" / "demo" / stamp).resolve()
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with (
            _broker(bootstrap, console, kafka=kafka) as address,
            StatsdSink(root / METRICS_FILE) as sink,
            _metadata_db(postgres, console) as database_url,
        ):
            topic = "orders" if bootstrap is None else f"orders-demo-{uuid.uuid4().hex[:6]}"
            deployment = prepare(
                root, topic=topic, bootstrap=address, statsd_port=sink.port, database_url=database_url
            )
            demo = Demo(
                deployment,
                address,
                orders=orders,
                partitions=partitions,
                fast=fast,
                console=console,
                screenshot=screenshot,
            )
            mode = "fast: `airflow dags test` in schedule order" if fast else "the Airflow scheduler"
            tiers = ", ".join(f"{t.topic} {t.delay_ms // 1000}s" for t in deployment.topology.retry_tiers)
            console.print(
                f"[bold]airflow-kafka-retry demo[/]: {orders} orders on {topic} ({partitions} "
                f"partitions), tiers {tiers}, run by {mode}. Working directory: {root}"
            )
            try:
                account = demo.run()
            finally:
                demo.stop()
            print_account(console, account, f"{account.produced} produced")
            data = flow_data(account, deployment.topology)
            (root / "account.json").write_text(json.dumps(account.to_dict(), indent=2, sort_keys=True))
            title = (
                f"{account.produced} orders through the retry tiers of {topic}, run by "
                f"{'airflow dags test' if fast else 'the Airflow scheduler'}; the DLT replayed after the fix"
            )
            png = draw(data, root / "flow.png", title=title)
            console.print(f"picture of the flow: [bold]{png}[/] (its data: {png.with_suffix('.json')})")
            _observability(console, root, deployment)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: Airflow and the broker were stopped[/]")
        return 130
    except DemoError as exc:
        console.print(f"[bold red]demo failed:[/] {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    console.print(
        f"took {time.monotonic() - started:.0f}s. Airflow and the broker are stopped; everything is in {root}"
    )
    console.print(
        "Against a real cluster: [bold]airflow-kafka-retry demo --bootstrap HOST:9092[/] (fresh "
        "orders-demo-* topics); in your own Airflow, set the [bold]kafka_default[/] connection "
        '(e.g. AIRFLOW_CONN_KAFKA_DEFAULT=\'{"conn_type": "kafka", "extra": '
        '{"bootstrap.servers": "HOST:9092"}}\') and copy dags/example_retry_tiers.py.'
    )
    return 0 if account.reconciles else 1


def _observability(console: Console, root: Path, deployment: Deployment) -> None:
    """What the demo's Airflow reported through its metrics and OpenLineage settings."""
    lineage = lineage_edges(read_events(root / LINEAGE_DIR))
    if lineage["edges"]:
        png = draw_lineage(
            lineage,
            deployment.topology,
            root / "lineage.png",
            title=f"OpenLineage: records between the topics of {lineage['namespace']}, from the "
            f"events of {sum(lineage['runs'].values())} task runs",
        )
        console.print(
            f"lineage graph from the OpenLineage events: [bold]{png}[/] (events: {root / LINEAGE_DIR})"
        )
    else:
        console.print(
            "no OpenLineage events (the provider is not installed: "
            "pip install 'airflow-kafka-retry[openlineage]')"
        )
    drained = counter_totals(root / METRICS_FILE).get("tier.drained", {})
    if drained:
        console.print(
            "metrics (StatsD, kafka_retry.tier.drained): "
            + ", ".join(f"{tier} {int(n)}" for tier, n in sorted(drained.items()))
            + f" (all lines: {root / METRICS_FILE})"
        )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def _metadata_db(postgres: bool, console: Console) -> Iterator[str | None]:
    """
    Yield the metadata DB's URL: ``None`` for SQLite in the Airflow home.

    With ``postgres``, a database on a private PostgreSQL server (Debian's ``postgresql``), stopped at
    the end.
    """
    if not postgres:
        yield None
        return
    from airflow_kafka_retry.sandbox.postgres import PostgresCluster, PostgresError

    try:
        pg = PostgresCluster().start()
    except PostgresError as exc:
        raise DemoError(str(exc)) from None
    try:
        console.print(f"PostgreSQL metadata DB: a private server at 127.0.0.1:{pg.port} (pid {pg.pid})")
        yield pg.create_database("airflow_demo")
    finally:
        console.print("stopping PostgreSQL")
        pg.stop()


@contextmanager
def _broker(bootstrap: str | None, console: Console, *, kafka: bool = False) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from airflow_kafka_retry.sandbox.broker import EmbeddedBroker
    from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka

    if kafka:
        console.print("starting Apache Kafka (single node, KRaft) from its Maven Central jars")
    with ApacheKafka(jvm_options=QUICK_JIT) if kafka else EmbeddedBroker() as broker:
        what = (
            f"Apache Kafka {broker.version}"
            if isinstance(broker, ApacheKafka)
            else "embedded Kafka-protocol broker (Tansu, memory only)"
        )
        console.print(f"{what} at {broker.bootstrap}")
        try:
            yield broker.bootstrap
        finally:
            console.print("stopping the broker")
