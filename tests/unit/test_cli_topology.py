"""``airflow-kafka-retry topology show``: the resolved path as JSON, or the error with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from airflow_kafka_retry.cli import main

EXAMPLE = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"


def test_show_prints_the_resolved_path(capsys):
    assert main(["topology", "show", str(EXAMPLE)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(t["topic"], t["delay_ms"]) for t in shown["tiers"]] == [
        ("orders", 0),
        ("orders-retry-1", 30_000),
        ("orders-retry-2", 60_000),
        ("orders-retry-3", 120_000),
    ]
    assert shown["dlt"] == "orders-dlt"
    assert shown["dlt_topics"] == ["orders-dlt", "orders-validation-dlt"]
    assert shown["attempts"] == 4
    assert [t["consumer_group"] for t in shown["tiers"]][1] == "orders-service-orders-retry-1"


def test_show_reports_validation_errors_with_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topic: orders\ngroup_id: svc\nbackoff: {kind: exponential, initial: 30x}\n")
    assert main(["topology", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "backoff.initial" in err
    assert "30x" in err


def test_drain_fails_fast_on_a_handler_that_cannot_be_imported(tmp_path, capsys):
    assert (
        main(
            [
                "drain",
                "--topology",
                str(EXAMPLE),
                "--tier",
                "1",
                "--handler",
                "no_such_module:handle",
                "--bootstrap",
                "127.0.0.1:1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "no_such_module" in err
    assert "cannot import" in err


def test_drain_rejects_an_unknown_tier(capsys):
    assert (
        main(
            [
                "drain",
                "--topology",
                str(EXAMPLE),
                "--tier",
                "7",
                "--handler",
                "json:loads",
                "--bootstrap",
                "127.0.0.1:1",
            ]
        )
        == 2
    )
    assert "tier 7 does not exist" in capsys.readouterr().err


def test_the_installed_console_script_prints_json_or_exits_2(tmp_path):
    script = Path(sys.executable).with_name("airflow-kafka-retry")
    assert script.exists(), "the console script is not installed next to this Python"
    shown = subprocess.run(
        [str(script), "topology", "show", str(EXAMPLE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["dlt"] == "orders-dlt"
    bad = tmp_path / "bad.yaml"
    bad.write_text("topic: orders\ngroup_id: svc\nattempts: 0\n")
    refused = subprocess.run(
        [str(script), "topology", "show", str(bad)], check=False, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.startswith(
        f"airflow-kafka-retry: error: {bad}: field 'attempts': must be an integer"
    )
