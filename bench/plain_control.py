"""
The capacity bench's control: Airflow's own cost of as many plain DAGs as the topologies' DAGs.

``plain_dags(N, dag_layout=...)``: the same Airflow with ``PER_TOPOLOGY[dag_layout][0] x N`` plain DAGs
from one file, shaped as the factory's DAGs of that layout but doing nothing (``EmptyOperator``s, no asset,
no trigger, no provider code), on weekly schedules spread as the factory's sweeps: what the scheduler and
the dag-processor cost for that many DAGs whatever they do, measured over the same settled window as
``bench/capacity.py``. ``tiers``: 4 x N DAGs of one task (a tier's ``reprocess``; the bench's tier
layout has no setup DAG); ``topology``: N DAGs of the topology DAG's 5 tasks, all roots
(``ensure_topics``, ``main``, ``retry_1``, ``retry_2``, ``watch_dlt``).
"""

from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster, airflow_env
from bench.airflow_deploy import REPO, counts, deployed, measure_window
from bench.capacity import PER_TOPOLOGY, parse_seconds, settle

if TYPE_CHECKING:
    from testkit.airflow_postgres import AirflowDatabases

PLAIN_DAG_FILE = """
from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

for i in range({count}):
    with DAG(
        f"plain_{{i:04d}}",
        schedule=f"{{i % 60}} {{(i // 60) % 24}} * * {{i % 7}}",  # weekly, spread as the factory's sweeps
        start_date=datetime.fromisoformat("{start}"),  # deployment time: no earlier tick is run
        catchup=False,
    ) as dag:
        {tasks}
    globals()[dag.dag_id] = dag
"""

#: The tasks of a plain DAG, shaped as the factory's DAG of each layout.
PLAIN_TASKS = {
    "tiers": 'EmptyOperator(task_id="reprocess")',
    "topology": (
        '[EmptyOperator(task_id=t) for t in ("ensure_topics", "main", "retry_1", "retry_2", "watch_dlt")]'
    ),
}


def plain_dags(
    count: int, seconds: float, databases: AirflowDatabases | None = None, *, dag_layout: str = "topology"
) -> dict[str, Any]:
    """Airflow with as many plain DAGs as ``count`` topologies have in ``dag_layout``: idle CPU, settled."""
    dags = PER_TOPOLOGY[dag_layout][0] * count
    with tempfile.TemporaryDirectory(prefix="akr-bench-plain-") as tmp:
        home = Path(tmp)
        database_url = databases.new() if databases is not None else None
        env = airflow_env(
            home,
            extra={
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
                "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "900",
            },
            pythonpath=[REPO],
            database_url=database_url,
        )
        start = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        (home / "dags" / "plain_dags.py").write_text(
            PLAIN_DAG_FILE.format(count=dags, start=start, tasks=PLAIN_TASKS[dag_layout])
        )
        started = time.monotonic()
        cluster = AirflowCluster(home, env, cwd=REPO, migrated=database_url is not None).start()
        try:
            deadline = time.monotonic() + 900
            while deployed(cluster)["dags"] < dags:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {dags} plain DAGs were not all parsed in 900 s")
                cluster.check_alive()
                time.sleep(5)
            ready_s = round(time.monotonic() - started, 1)
            settle_s = settle(cluster)
            idle = measure_window(cluster, None, seconds)
            return {
                "case": "plain",
                "dag_layout": dag_layout,
                "topologies_equivalent": count,
                "dags": dags,
                "tasks": PLAIN_TASKS[dag_layout],
                "deployed": deployed(cluster),
                "ready_seconds": ready_s,
                "settle_seconds": settle_s,
                "parse": parse_seconds(cluster),
                "idle": idle,
                "dag_runs_since_deployment": counts(cluster)[0],
            }
        finally:
            cluster.stop()
