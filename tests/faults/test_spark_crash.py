"""Case 6: the handler ends its Spark executor's Python worker: ``os._exit`` on one partition, a
segmentation fault on the other. Spark retries each task; the retry re-initialises the partition's
transactional id (fencing whatever the dead attempt left open) and resumes from the committed offset.

A *live* older attempt (speculative execution, or a zombie) is fenced by the same mechanism, per
partition: case 7 starts two runs of one partition at once and shows the older one fenced.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.spark.submit import run_spark_submit

from tests.faults.helpers import options
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 2
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "512m",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.fault_case(
    "6",
    "the handler calls os._exit (partition 0) and dereferences NULL, a segfault (partition 1), "
    "in the Spark executor's Python worker, in the 2nd chunk of each partition (local[2,4])",
)
def test_a_handler_that_kills_its_spark_worker_loses_nothing(kafka_bootstrap, tmp_path, fault_result):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_fault_topology(ledger.make_fault_topology("spark-crash"), topology_file)
    specs = [FaultInput(MODES[i % 5]) for i in range(160)]
    specs[110], specs[111] = (
        FaultInput("exit"),
        FaultInput("segv"),
    )  # offset 55 of partition 0 and of partition 1
    inputs = ledger.produce_fault_inputs(kafka_bootstrap, topology, specs, PARTITIONS)
    markers = tmp_path / "markers"
    markers.mkdir()
    config = {"bootstrap.servers": kafka_bootstrap}
    output: list[str] = []

    summary = run_spark_submit(
        topology_path=topology_file,
        tier=0,
        options=options(),
        kafka_config=config,
        master="local[2,4]",
        conf=SPARK_CONF,
        on_output=output.append,
        env={"SPARK_LOCAL_IP": "127.0.0.1", "AKR_LEDGER": ledger_file, "AKR_KILL_DIR": str(markers)},
    )

    assert summary.ok, summary.to_dict()["partitions"]
    assert sorted(p.name for p in markers.iterdir()) == [
        f"exit.{topology.topic}.0",
        f"segv.{topology.topic}.1",
    ]
    lost_tasks = [
        line for line in output if "Lost task" in line or "Python worker exited unexpectedly" in line
    ]
    assert lost_tasks, "Spark did not report the crashed attempts"
    for partition in summary.partitions:  # the retried attempt resumed after the committed first chunk
        assert partition.start_offset == 50, partition
    for tier in topology.tiers[1:]:
        later = run_local(topology, tier, config, options())
        assert later.ok, later.to_dict()["partitions"]

    account = ledger.account(
        kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, allow_duplicates=False, handled_once=False
    )
    fault_result(
        "both worker deaths were task failures that Spark retried; each retry resumed at the committed "
        "offset 50 (the dead attempt's chunk was not committed) and finished; no copy in any tier or DLT",
        account,
    )
