"""``ReprocessTierOperator.execute`` against the real broker: ``max_run`` passing mid-run stops at a chunk
boundary.

No Airflow process here (``test_reprocess_operator_dag.py`` runs the operator under ``airflow dags
test``): the operator is executed directly, with its Kafka connection from ``AIRFLOW_CONN_*``.
"""

from __future__ import annotations

import json

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors
from confluent_kafka import OFFSET_INVALID

from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator

from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 200  # per partition: at least 4 s of handler pauses, twice max_run
CHUNK = 10


class TI:
    dag_id, run_id, task_id, map_index = "orders_retry", "manual__1", "reprocess", -1

    def __init__(self) -> None:
        self.xcom: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcom[key] = value


def test_max_run_stops_the_operator_at_a_chunk_boundary_and_the_next_run_finishes(
    kafka_bootstrap, tmp_path, monkeypatch
):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    monkeypatch.setenv("AKR_SLOW_S", "0.1")  # 2 batches per chunk: a chunk takes 0.2 s or more
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("opstop"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, 1)
    notified = []

    def operator(**kwargs) -> ReprocessTierOperator:
        return ReprocessTierOperator(
            task_id="reprocess",
            topology=str(tmp_path / "topology.yaml"),
            tier=0,
            handler="tests.support.ledger_handler:slow_indexed",
            value_deserializer="tests.support.ledger_handler:decode",
            options={"batch_size": 5, "chunk_size": CHUNK},
            on_dlt=notified.append,
            cutoff="2100-01-01T00:00:00",
            **kwargs,
        )

    context = {"ti": TI(), "run_id": "manual__1", "outlet_events": OutletEventAccessors()}
    first = operator(max_run="2s").execute(context)

    assert first["status"] == "ok", first["partitions"]
    assert first["stopped"] == "max_run", first["partitions"]
    [part] = first["partitions"]
    assert part["stop_reason"] == "stopped"
    assert part["stopped_by"] == "max_run"
    boundary = part["committed_offset"]
    assert boundary is not None, part
    assert 0 < boundary < COUNT, part
    assert boundary % CHUNK == 0, part
    assert part["left"] == COUNT - boundary
    group = topology.consumer_group(topology.tier(0))
    assert ledger.committed(kafka_bootstrap, group, topology.topic, 1) == {0: boundary}
    below = {rid for rid, (mode, _, offset) in inputs.records.items() if offset < boundary and mode == "ok"}
    assert set(ledger.processed_ids(ledger_file)) == below
    assert len(notified) == 1, "what the stopped run dead-lettered is committed: notify it"

    rest = operator().execute({**context, "ti": TI()})
    assert rest["stopped"] is None
    assert rest["totals"]["drained"] == COUNT - boundary
    assert ledger.committed(kafka_bootstrap, group, topology.topic, 1) == {0: COUNT}
    for tier in topology.tiers[1:]:
        ReprocessTierOperator(
            task_id=f"tier_{tier.index}",
            topology=str(tmp_path / "topology.yaml"),
            tier=tier.index,
            handler="tests.support.ledger_handler:indexed",
            value_deserializer="tests.support.ledger_handler:decode",
            cutoff="2100-01-01T00:00:00",
        ).execute({**context, "ti": TI()})
    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, 1)


def test_on_kill_and_max_run_reach_every_worker_process(kafka_bootstrap, tmp_path, monkeypatch):
    """Three partitions in two worker processes: ``max_run`` (in the options) and ``on_kill`` (sent by the
    engine) stop each partition at a chunk boundary; the killed task fails with the summary in XCom."""
    import threading
    import time

    from airflow.providers.common.compat.sdk import AirflowException

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    monkeypatch.setenv("AKR_SLOW_S", "0.1")
    ledger_file = ledger.ledger_path(tmp_path)
    partitions = 3
    topology = ledger.write_topology(ledger.make_topology("opkillp"), tmp_path / "topology.yaml")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT * partitions, partitions)
    group = topology.consumer_group(topology.tier(0))

    def operator(**kwargs) -> ReprocessTierOperator:
        return ReprocessTierOperator(
            task_id="reprocess",
            topology=str(tmp_path / "topology.yaml"),
            tier=0,
            handler="tests.support.ledger_handler:slow_indexed",
            value_deserializer="tests.support.ledger_handler:decode",
            options={"batch_size": 5, "chunk_size": CHUNK},
            parallelism=partitions,
            cutoff="2100-01-01T00:00:00",
            **kwargs,
        )

    def check_boundaries(document: dict, reason: str) -> dict[int, int]:
        assert document["stopped"] == reason, document
        boundaries = {}
        for part in document["partitions"]:
            assert part["status"] == "ok", part
            assert part["stopped_by"] == reason, part
            boundary = (
                part["committed_offset"] if part["committed_offset"] is not None else part["start_offset"]
            )
            if boundary is None:  # a loaded machine stopped its process before the first chunk: no commit
                assert part["drained"] == 0, part
                boundaries[part["partition"]] = OFFSET_INVALID
                continue
            assert boundary < COUNT, part
            assert boundary % CHUNK == 0, part
            boundaries[part["partition"]] = boundary
        assert ledger.committed(kafka_bootstrap, group, topology.topic, partitions) == boundaries
        return boundaries

    context = {"ti": TI(), "run_id": "manual__1", "outlet_events": OutletEventAccessors()}
    timed = check_boundaries(operator(max_run="2s").execute(context), "max_run")

    killed = operator()
    ti = TI()
    before = sum(ledger.processed_ids(ledger_file).values())

    def kill_once_handling() -> None:
        while sum(ledger.processed_ids(ledger_file).values()) < before + 20:
            time.sleep(0.05)
        killed.on_kill()

    killer = threading.Thread(target=kill_once_handling, daemon=True)
    killer.start()
    with pytest.raises(AirflowException, match="killed"):
        killed.execute({**context, "ti": ti})
    killer.join(timeout=60)
    after_kill = check_boundaries(ti.xcom["summary"], "killed")
    assert sum(max(0, b) for b in after_kill.values()) > sum(max(0, b) for b in timed.values())

    operator().execute({**context, "ti": TI()})
    for tier in topology.tiers[1:]:
        ReprocessTierOperator(
            task_id=f"tier_{tier.index}",
            topology=str(tmp_path / "topology.yaml"),
            tier=tier.index,
            handler="tests.support.ledger_handler:indexed",
            value_deserializer="tests.support.ledger_handler:decode",
            cutoff="2100-01-01T00:00:00",
        ).execute({**context, "ti": TI()})
    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, partitions)
