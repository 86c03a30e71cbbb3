"""
The demo's course: broker, Airflow, orders, the tiers at work, the fix and DLT replay, the account.

The retry path is one topology DAG with a task per tier (``deployment.py``). Full mode runs it under
the real scheduler (api-server, scheduler, dag-processor and triggerer, LocalExecutor on SQLite, or on
a private PostgreSQL server with ``postgres``): the topology's watcher starts a run naming the tiers
that are due (and, first, ``ensure_topics``). ``fast`` runs it with ``airflow dags test``, a run per
tier with records waiting, in schedule order, its conf naming that tier's task (for CI). Every process
started here is stopped on the way out, on errors and Ctrl-C too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.live import Live
from rich.markup import escape

from airflow_kafka_retry.demo.account import (
    Account,
    produced_fates,
    read_parked,
    read_produced,
    reconcile,
)
from airflow_kafka_retry.demo.commands import AirflowCommands, DemoError
from airflow_kafka_retry.demo.deployment import LINEAGE_DIR, Deployment
from airflow_kafka_retry.demo.lineage_graph import read_events, unfinished_runs
from airflow_kafka_retry.demo.orders import FIX_FLAG, LEDGER_FILE, order_record, read_lines
from airflow_kafka_retry.demo.progress import ProgressReader, Snapshot, render, xcom_summaries
from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster

if TYPE_CHECKING:
    from rich.console import Console

PHASE_TIMEOUT_S = 600
STREAM_S = 20.0  # full mode: the orders arrive over this long


class Demo:
    """One run of the demo: the deployment, its orders, the live table and the final account."""

    def __init__(
        self,
        deployment: Deployment,
        bootstrap: str,
        *,
        orders: int,
        partitions: int,
        fast: bool,
        console: Console,
        screenshot: Path | None = None,
    ) -> None:
        self.d = deployment
        self.screenshot = screenshot  # where to save a picture of the Retry tiers view (full mode)
        self.bootstrap = bootstrap
        self.orders = orders
        self.partitions = partitions
        self.fast = fast
        self.console = console
        self.kafka_config = {"bootstrap.servers": bootstrap}
        self.reader = ProgressReader(deployment, self.kafka_config)
        self.cluster = AirflowCluster(deployment.home, deployment.env)
        self.started = time.monotonic()
        # fast: the DAG's runs one after another in one Airflow process, which starts up once
        self.commands = AirflowCommands(
            airflow=self.cluster.airflow, env=deployment.env, home=deployment.home, warm=fast
        )

    # ------------------------------------------------------------------ the course
    def run(self) -> Account:
        from airflow_kafka_retry.sandbox.scratch_topics import create_topics

        topology = self.d.topology
        # the shop's topic; the DAG's setup task creates the tiers, DLTs and parking topic
        create_topics(self.bootstrap, [topology.topic], self.partitions)
        if self.fast:
            self._say(
                f"Airflow: metadata DB ({self.d.database_name}), DAGs parsed; {self.d.dag_id} runs with "
                "`airflow dags test`, one run after another in one Airflow process, its conf naming the tasks"
            )
            self.cluster.migrate()
            self._cli("dags", "reserialize")
            self._test_run(self.d.setup_task)
        else:
            self._say(
                "Airflow: starting api-server, scheduler, dag-processor, triggerer "
                f"({self.d.database_name}, LocalExecutor)"
            )
            self.cluster.start()
            self._say(
                f"[bold]Airflow UI: {self.d.api_url}/[/]  (Browse → Retry tiers: "
                f"{self.d.api_url}/kafka-retry/)  [yellow]demo only: no login, every visitor is an admin[/]"
            )
            self._wait_for_setup()
        tasks = ", ".join(self.d.task_id(t) for t in self.d.tiers)
        self._say(
            f"{self.d.dag_id}'s {self.d.setup_task} task created the retry path's topics; its tier tasks ("
            f"{tasks}) run when their records are due, {self.d.watch_task} when dead letters arrive"
            + ("" if self.fast else " (the topology's watcher in the triggerer starts a run naming them)")
        )
        producer = self._produce()
        self._drain("orders flowing through the tiers", producer)
        if self.fast:
            self._test_run(self.d.watch_task)  # the DLT watch: alerts for new records
        self._say(
            f"[bold]Fixing the bug[/]: CHF exchange rates deployed ({FIX_FLAG}). Replaying "
            f"{topology.dlt_topic} with the replay DAG {self.d.replay_dag_id} (dry_run off)"
        )
        (self.d.root / FIX_FLAG).touch()
        self._replay()
        self._drain("replayed orders going through again", None)
        self._quiesce()
        return self._account()

    def _wait_for_setup(self) -> None:
        """
        Until the DAG's setup task succeeded in some run; the orders flow once it has.

        The topology's watcher finds the retry path's topics missing and fires an event naming the setup
        task (a sweep run would run it too); the task retries a few times on its own.
        """
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while True:
            states = [
                s
                for (s,) in self.cluster.query(
                    "SELECT state FROM task_instance WHERE dag_id = ? AND task_id = ?",
                    self.d.dag_id,
                    self.d.setup_task,
                )
            ]
            if "success" in states:
                return
            if "failed" in states or time.monotonic() > deadline:
                raise DemoError(
                    f"{self.d.dag_id}.{self.d.setup_task} did not create the topics ({states or 'no run'}); "
                    f"see the logs in {self.d.home}"
                )
            self.cluster.check_alive()
            time.sleep(1)

    def _produce(self) -> threading.Thread | None:
        from confluent_kafka import Producer

        topic = self.d.topology.topic
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        failures: list[str] = []

        def send(ids: range) -> None:
            for i in ids:
                key, value = order_record(i)
                producer.produce(
                    topic,
                    key=key,
                    value=value,
                    partition=i % self.partitions,
                    on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
                )
            if producer.flush(30) or failures:
                raise DemoError(f"could not produce orders to {topic}: {failures[:3]}")
            self.reader.produced = ids.stop

        if self.fast:
            send(range(self.orders))
            return None
        batches = 10

        def stream() -> None:
            step = -(-self.orders // batches)
            for start in range(0, self.orders, step):
                send(range(start, min(start + step, self.orders)))
                time.sleep(STREAM_S / batches)

        thread = threading.Thread(target=stream, name="demo-orders", daemon=True)
        thread.start()
        return thread

    def _drain(self, phase: str, producer: threading.Thread | None) -> None:
        """Until every tier's group has committed to the end of its topic (twice in a row)."""
        self.reader.phase = phase
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        if self.fast:
            self._drain_fast(deadline)
            return
        settled = 0
        with self._live() as show:
            while settled < 2:
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"{phase}: not settled after {PHASE_TIMEOUT_S}s; see the logs in {self.d.home}"
                    )
                self.cluster.check_alive()
                snap = self.reader.snapshot()
                show(snap)
                busy = producer is not None and producer.is_alive()
                settled = settled + 1 if snap.settled and not busy else 0
                if self.screenshot is not None and (_worth_a_picture(snap) or settled == 2):
                    self._picture(self.screenshot)
                time.sleep(2)

    def _drain_fast(self, deadline: float) -> None:
        while True:
            snap = self.reader.snapshot()
            self._show(snap)
            waiting = [t for t in snap.tiers if t.waiting != 0]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise DemoError(f"{self.reader.phase}: records still waiting after {PHASE_TIMEOUT_S}s")
            for tier in waiting:  # in schedule order: main topic, then each tier
                if tier.next_due_ms is not None:
                    time.sleep(max(0.0, tier.next_due_ms / 1000 - time.time()))
                self._test_run(tier.task_id)
                self._show(self.reader.snapshot())

    def _test_run(self, *task_ids: str) -> None:
        """Fast mode: a run of the topology DAG (``airflow dags test``) that runs only ``task_ids``."""
        self._cli("dags", "test", self.d.dag_id, "--conf", self.d.lanes_conf(*task_ids))

    def _picture(self, path: Path) -> None:
        """The Retry tiers view of this demo's Airflow, once: records waiting in a tier and dead letters."""
        from airflow_kafka_retry.demo.screenshot import view_screenshot

        self.screenshot = None
        self._say(f"picture of the Retry tiers view: {view_screenshot(self.d.api_url, path)}")

    def _replay(self) -> None:
        conf = json.dumps({"dry_run": False})
        if self.fast:
            self._cli("dags", "test", self.d.replay_dag_id, "--conf", conf)
        else:
            self._cli("dags", "trigger", self.d.replay_dag_id, "--conf", conf)
            deadline = time.monotonic() + PHASE_TIMEOUT_S
            while True:
                states = [
                    s
                    for (s,) in self.cluster.query(
                        "SELECT state FROM dag_run WHERE dag_id = ?", self.d.replay_dag_id
                    )
                ]
                if states and states[-1] in ("success", "failed"):
                    break
                if time.monotonic() > deadline:
                    raise DemoError(f"the replay DAG did not finish in {PHASE_TIMEOUT_S}s")
                self.cluster.check_alive()
                time.sleep(2)
        rows = self.cluster.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'replay_dlt'", self.d.replay_dag_id
        )
        summary = rows[-1][0] if rows else None
        while isinstance(summary, (str, bytes)):  # text on SQLite (JSON in JSON), decoded on PostgreSQL
            summary = json.loads(summary)
        if not summary or summary.get("status") != "ok":
            raise DemoError(
                f"the DLT replay failed: {summary and summary.get('error')}; task log under {self.d.home}"
            )
        targets = ", ".join(f"{t}: {n}" for t, n in summary["targets"].items())
        self._say(
            f"replay {summary['replay_id']}: moved {summary['moved']} record(s) from {summary['dlt']} "
            f"({targets}), each in a Kafka transaction with its entry in the replay log"
        )

    def _quiesce(self, timeout_s: float = 180) -> None:
        """
        Pause the demo's DAGs and let the tasks still going finish; only then stop Airflow.

        Their OpenLineage events get written too: a task's listener emits after Airflow recorded its end.
        """
        if self.fast:
            return
        self._cli("dags", "pause", "--treat-dag-id-as-regex", "-y", "^kafka_")
        deadline = time.monotonic() + timeout_s
        busy = ("running", "queued", "scheduled", "deferred", "up_for_reschedule", "restarting")
        marks = ", ".join("?" * len(busy))
        while self.cluster.query(f"SELECT count(*) FROM task_instance WHERE state IN ({marks})", *busy)[0][
            0
        ] or unfinished_runs(read_events(self.d.root / LINEAGE_DIR)):
            if time.monotonic() > deadline:
                self._say(
                    f"[yellow]tasks or their lineage events still going after {timeout_s:.0f}s; stopping "
                    "Airflow anyway[/]"
                )
                return
            self.cluster.check_alive()
            time.sleep(1)

    def _account(self) -> Account:
        """Reconcile what the topic holds (read back, not what the producer meant to write) with the books."""
        topology = self.d.topology
        written = read_produced(self.kafka_config, topology.topic)
        produced = produced_fates(written)
        (self.d.root / "produced.json").write_text(json.dumps(produced))
        parked = read_parked(self.kafka_config, topology)
        tasks = [self.d.task_id(tier) for tier in self.d.tiers]
        summaries = [s for _, _, s in xcom_summaries(self.d.database_url, self.d.dag_id, tasks)]
        return reconcile(
            topology,
            produced,
            read_lines(self.d.root / LEDGER_FILE),
            parked,
            summaries,
            intended=self.orders,
            written=written,
        )

    # ------------------------------------------------------------------ output and processes
    def _say(self, text: str) -> None:
        self.console.print(f"[dim]{self._elapsed():>4.0f}s[/] {text}")

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _show(self, snap: Snapshot) -> None:
        self.console.print(render(snap, elapsed_s=self._elapsed()))

    @contextmanager
    def _live(self) -> Iterator[Callable[[Snapshot], None]]:
        if not self.console.is_terminal:
            last = [0.0]
            unshown: list[Snapshot] = []

            def show(snap: Snapshot) -> None:  # a log, not a terminal: a table every 15 s, and the last one
                unshown[:] = [snap]
                if time.monotonic() - last[0] >= 15:
                    last[0] = time.monotonic()
                    self._show(unshown.pop())

            yield show
            if unshown:  # the phase's end, as a terminal keeps its last table
                self._show(unshown.pop())
            return
        with Live(console=self.console, refresh_per_second=2, transient=False) as live:
            yield lambda snap: live.update(render(snap, elapsed_s=self._elapsed()))

    def _cli(self, *args: str, timeout: float = 600) -> str:
        """``airflow *args``, announced: its output (a :class:`DemoError` if it failed)."""
        self._say(f"[cyan]airflow {escape(' '.join(args))}[/]")
        return self.commands.run(*args, timeout=timeout)

    def stop(self) -> None:
        self.commands.stop()
        if self.cluster.processes:
            self._say("stopping Airflow")
            self.cluster.stop()


def _worth_a_picture(snap: Snapshot) -> bool:
    """A retry tier holds records and the DLT some dead letters: the view shows the path at work."""
    return any(t.waiting for t in snap.tiers[1:]) and any(n for n in snap.dlt_records.values())
