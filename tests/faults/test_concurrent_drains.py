"""Case 7 (command line): two ``airflow-kafka-retry drain`` processes of the same tier at once.

Both use the deterministic transactional id of each (tier group, topic, partition): whichever
initialises a partition's transactions last fences the other on that partition (its next commit
fails with ``FencedError``, nothing of its chunk is committed), and reads the committed offset only
after fencing, so no chunk is committed twice. The ledger holds.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.faults.helpers import REPO, cli_drain, cli_drain_cmd, cli_env, cli_summary
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 2
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")


def _two_drains_at_once(bootstrap: str, tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    topology_file = tmp_path / "topology.yaml"
    topology = ledger.write_fault_topology(ledger.make_fault_topology("twice"), topology_file)
    inputs = ledger.produce_fault_inputs(
        bootstrap, topology, [FaultInput(MODES[i % 5]) for i in range(200)], PARTITIONS
    )
    env = cli_env(tmp_path, ledger_file, AKR_SLOW_S="0.1")
    cmd = cli_drain_cmd(topology_file, 0, bootstrap)

    first = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.5)
    second = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    results = []
    for proc in (first, second):
        out, err = proc.communicate(timeout=240)
        results.append(cli_summary(subprocess.CompletedProcess(proc.args, proc.returncode, out, err)))

    fenced = [
        (i, p["partition"])
        for i, r in enumerate(results)
        for p in r["partitions"]
        if p["status"] == "failed" and "fenced by a newer run" in (p["error"] or "")
    ]
    other = [
        p["error"]
        for r in results
        for p in r["partitions"]
        if p["status"] == "failed" and "fenced by a newer run" not in (p["error"] or "")
    ]
    assert fenced, "the two runs never met on a partition: start the second one earlier or slow the handler"
    assert not other, other
    for partition in range(PARTITIONS):  # on every partition at least one of the two finished
        assert any(
            p["status"] == "ok" for r in results for p in r["partitions"] if p["partition"] == partition
        )

    env.pop("AKR_SLOW_S")
    for tier in topology.tiers:  # then the tiers run as usual
        done = cli_drain(topology_file, tier.index, bootstrap, env)
        assert done.returncode == 0, done.stderr[-3000:]
    return topology, inputs, ledger_file, fenced


@pytest.mark.slow
@pytest.mark.fault_case(
    "7",
    "two `airflow-kafka-retry drain` processes of the main tier started 1.5 s apart, "
    "each handling 2 partitions of 100 records slowly (0.1 s per handler call)",
)
def test_two_cli_drains_of_one_tier_at_once_one_is_fenced_per_partition(
    kafka_bootstrap, tmp_path, fault_result
):
    topology, inputs, ledger_file, fenced = _two_drains_at_once(kafka_bootstrap, tmp_path)
    # the fenced run handled records it could not commit (handled again by the winner); its aborted routed
    # records may show on a broker without abort isolation (the next test checks there are none where it
    # has it)
    account = ledger.account(
        kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, allow_duplicates=True, handled_once=False
    )
    where = ", ".join(f"run {'AB'[i]} on partition {p}" for i, p in fenced)
    fault_result(
        f"fenced: {where} (FencedError, nothing of its chunk committed); the other run finished each "
        "partition",
        account,
    )


@pytest.mark.slow
@pytest.mark.requires_capability("abort_isolation")
@pytest.mark.fault_case(
    "7", "the same, checking that the fenced run's aborted records appear nowhere (no copies)"
)
def test_two_cli_drains_of_one_tier_at_once_duplicate_nothing(kafka_bootstrap, tmp_path, fault_result):
    topology, inputs, ledger_file, fenced = _two_drains_at_once(kafka_bootstrap, tmp_path)
    account = ledger.account(
        kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, allow_duplicates=False, handled_once=False
    )
    fault_result(
        "fenced run's routed records were aborted and never read: no copies in any tier or DLT", account
    )
