"""
What every ``airflow-kafka-retry`` command shares: exit codes, Kafka options, JSON output, error lines.

Both :mod:`airflow_kafka_retry.cli` and :mod:`airflow_kafka_retry.dlt.cli` import from here; this
module imports neither, so the two never import each other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    sys.stderr.write(f"airflow-kafka-retry: error: {message}\n")
    return code


def add_kafka_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap", default=None, help="bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument(
        "--kafka-config",
        default=None,
        help="JSON file with librdkafka settings (credentials stay out of the command line)",
    )


def kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    """Librdkafka config from --kafka-config (a JSON file, may hold credentials) and --bootstrap."""
    config: dict[str, Any] = {}
    if args.kafka_config:
        with open(args.kafka_config, encoding="utf-8") as fh:
            config.update(json.load(fh))
    bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        config["bootstrap.servers"] = bootstrap
    if "bootstrap.servers" not in config:
        raise ValueError(
            "no Kafka cluster: pass --bootstrap HOST:PORT, --kafka-config FILE or set KAFKA_BOOTSTRAP_SERVERS"
        )
    return config
