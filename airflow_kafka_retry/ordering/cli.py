"""``airflow-kafka-retry ordering release``: the argparse wiring (the work is in :mod:`.release`)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from airflow_kafka_retry.cli_support import (
    EXIT_FAILED,
    EXIT_OK,
    add_kafka_args,
    fail,
    kafka_config,
    print_json,
)


def add_ordering_commands(sub: Any) -> None:
    """Add the ``ordering`` command group to the CLI's subparsers."""
    ordering = sub.add_parser("ordering", help="operate key-ordered retries (ordering: key)").add_subparsers(
        dest="action", required=True
    )
    release = ordering.add_parser(
        "release",
        help="release a blocked key by hand: a release mark in <topic>-hold; its keeper then handles "
        "the key's held records (audited)",
    )
    release.add_argument("--topology", required=True, help="topology YAML file (with ordering: key)")
    key = release.add_mutually_exclusive_group(required=True)
    key.add_argument("--key", default=None, help="the record key, UTF-8")
    key.add_argument(
        "--key-hex", default=None, metavar="HEX", help="the record key's bytes in hex (a binary key)"
    )
    release.add_argument(
        "--partition",
        type=int,
        default=None,
        metavar="P",
        help="the main topic's partition the key is blocked on (default: found in <topic>-order-state)",
    )
    release.add_argument("--reason", default=None, metavar="TEXT", help="why (kept in the mark)")
    release.add_argument("--by", default=None, metavar="NAME", help="who releases (default: the OS user)")
    release.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="the longest reading the state and writing the mark may take (default 30)",
    )
    add_kafka_args(release)
    release.set_defaults(func=_cmd_release)


def _cmd_release(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.ordering.release import (
        NotBlocked,
        audit,
        key_bytes,
        operator_name,
        release_key,
    )
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.topology)
    key = key_bytes(args.key, args.key_hex)
    by = operator_name(args.by)
    audit.setLevel(logging.INFO)  # the audit line is written whatever -v says
    try:
        released = release_key(
            topology,
            kafka_config(args),
            key,
            partition=args.partition,
            by=by,
            reason=args.reason,
            timeout_s=args.timeout,
        )
    except NotBlocked as exc:
        return fail(str(exc), EXIT_FAILED)
    print_json(released.to_dict())
    return EXIT_OK
