"""Case 5: the handler hangs. ``handler_timeout`` fails the batch, bisection isolates the record that
hangs, it is routed as a failure (``HandlerTimeoutError``), and the run goes on.

Runs through the CLI so that each run is its own process: the hung handler threads are abandoned
(a Python thread cannot be killed), and the process must still finish and exit.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.headers import codec as H

from tests.faults.helpers import cli_drain, cli_env, cli_summary
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 2
MODES = ("ok", "transient:1", "permanent", "fatal", "ok")


@pytest.mark.fault_case(
    "5",
    "a handler call that never returns, for one record per partition (whole-batch handler, "
    "batches of 10), with --handler-timeout 0.5 and --in-place-attempts 1",
)
def test_a_hanging_record_is_isolated_timed_out_and_routed_and_the_run_goes_on(
    kafka_bootstrap, tmp_path, fault_result
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_fault_topology(ledger.make_fault_topology("hangs"), tmp_path / "topology.yaml")
    specs = [FaultInput(MODES[i % len(MODES)]) for i in range(40)]
    specs[6] = specs[13] = FaultInput("hang")  # one per partition, in the first batch of each
    inputs = ledger.produce_fault_inputs(kafka_bootstrap, topology, specs, PARTITIONS)
    env = cli_env(tmp_path, ledger_file)

    runs = []
    for tier in topology.tiers:
        done = cli_drain(
            tmp_path / "topology.yaml",
            tier.index,
            kafka_bootstrap,
            env,
            "--handler-timeout",
            "0.5",
            "--in-place-attempts",
            "1",
            handler="whole_batch",
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]  # finished and exited, hung threads and all
        runs.append(cli_summary(done))

    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    dead = {
        H.last_header(m.headers(), ledger.FAULT_ID).decode(): m
        for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    }
    for rid in ("6", "13"):
        headers = dead[rid].headers()
        assert (
            H.last_header(headers, H.RETRY_TOPIC_NAMES.exception_fqcn)
            == b"airflow_kafka_retry.errors.HandlerTimeoutError"
        )
        # attempt 1 and its in-place try on the main topic, attempt 3 on retry-1 (no in-place try past the
        # topology's 3 attempts), then the DLT: Spring's attempts header says 4
        assert H.read_attempts(headers) == 4
    main = runs[0]["totals"]
    assert main["routed"][topology.tier(1).topic] >= 2
    assert main["drained"] == 40
    extra = sum(p["extra_handler_calls"] for run in runs for p in run["partitions"])
    fault_result(
        f"every run finished and its process exited; each hanging record was isolated by bisection and "
        f"tried in place once (each try costs the timeout and an abandoned thread), routed to retry-1 as "
        f"HandlerTimeoutError, then to the DLT with attempts 4; {extra} extra handler calls in all",
        account,
    )
