"""``airflow-kafka-retry topology show``: the resolved path as JSON, or the error with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_kafka_retry.cli import main

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"


def test_show_prints_the_resolved_path(capsys):
    assert main(["topology", "show", str(EXAMPLE)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(t["topic"], t["delay_ms"]) for t in shown["tiers"]] == [
        ("orders", 0), ("orders-retry-1", 30_000), ("orders-retry-2", 60_000), ("orders-retry-3", 120_000)]
    assert shown["dlt"] == "orders-dlt"
    assert shown["dlt_topics"] == ["orders-dlt", "orders-validation-dlt"]
    assert shown["attempts"] == 4
    assert [t["consumer_group"] for t in shown["tiers"]][1] == "orders-service-orders-retry-1"


def test_show_reports_validation_errors_with_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topic: orders\ngroup_id: svc\nbackoff: {kind: exponential, initial: 30x}\n")
    assert main(["topology", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "backoff.initial" in err and "30x" in err


def test_drain_fails_fast_on_a_handler_that_cannot_be_imported(tmp_path, capsys):
    assert main(["drain", "--topology", str(EXAMPLE), "--tier", "1", "--handler", "no_such_module:handle",
                 "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module" in err and "cannot import" in err


def test_drain_rejects_an_unknown_tier(capsys):
    assert main(["drain", "--topology", str(EXAMPLE), "--tier", "7", "--handler", "json:loads",
                 "--bootstrap", "127.0.0.1:1"]) == 2
    assert "tier 7 does not exist" in capsys.readouterr().err
