"""
The tier runs' drain through spark-submit on the secured broker (issue 48): exactly once with the tier
role's printed ACLs, the CA named by ``ssl.ca.location``; a CA file that is not there fails clearly.
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_retry.policy.acl import AclScope, acl_bindings
from airflow_kafka_retry.spark.submit import run_spark_submit

from tests.integration.test_spark_app import OPTIONS, SPARK_CONF, SPARK_ENV, SparkRunner
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2
COUNT = 70


def test_the_tier_role_drains_every_tier_through_spark_exactly_once(role_users, tmp_path):
    topology = ledger.write_topology(ledger.make_topology("secure-spark"), tmp_path / "topology.yaml")
    role_users.grant(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]))
    ledger_file = ledger.ledger_path(tmp_path)
    inputs = ledger.produce_inputs(role_users.internal, topology, COUNT, PARTITIONS)
    config = role_users.config("tiers")
    runner = SparkRunner(tmp_path / "topology.yaml", config, master="local[2]")

    ledger.run_tiers(topology, runner)

    ledger.check_ledger(role_users.internal, topology, inputs, ledger_file, PARTITIONS)
    seen = "\n".join(runner.output + runner.logged)
    assert config["sasl.password"] not in seen, "the password reached spark-submit's output or the log"


def test_a_ca_file_that_is_not_there_fails_naming_it(role_users, tmp_path):
    topology = ledger.write_topology(ledger.make_topology("secure-spark-ca"), tmp_path / "topology.yaml")
    role_users.grant(acl_bindings(topology, AclScope(include_main=True), roles=["tiers"]))
    ledger.produce_inputs(role_users.internal, topology, 10, PARTITIONS)
    config = {**role_users.config("tiers"), "ssl.ca.location": str(tmp_path / "no-such-ca.pem")}
    output: list[str] = []
    try:
        summary = run_spark_submit(
            topology_path=tmp_path / "topology.yaml",
            tier=0,
            options=OPTIONS,
            kafka_config=config,
            master="local[2]",
            conf=SPARK_CONF,
            env=SPARK_ENV,
            on_output=output.append,
        )
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
    else:
        message = json.dumps(summary.to_dict())
        assert not summary.ok, message[:2000]
    assert "ssl.ca.location" in message, message[-2000:]
    assert "no-such-ca.pem" in message, message[-2000:]
    offsets = ledger.committed(role_users.internal, topology.group_id, topology.topic, PARTITIONS)
    assert all(o < 0 for o in offsets.values()), "offsets moved"
