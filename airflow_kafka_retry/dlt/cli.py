"""
``airflow-kafka-retry dlt``: the argparse wiring of inspect, replay, replay-status and replay-stop.

The work is in this package.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airflow_kafka_retry.cli_support import (
    EXIT_FAILED,
    EXIT_OK,
    add_kafka_args,
    fail,
    kafka_config,
    print_json,
)
from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.policy.dead_letters.families import FAMILIES
from airflow_kafka_retry.policy.dead_letters.framework_headers import FRAMEWORK_HEADER_MODES


def add_dlt_commands(sub: Any) -> None:
    """Add the ``dlt`` command group to the CLI's subparsers."""
    dlt = sub.add_parser("dlt", help="inspect and replay dead-letter topics").add_subparsers(
        dest="action", required=True
    )
    inspect = dlt.add_parser("inspect", help="group a DLT's records (read only: nothing is committed)")
    inspect.add_argument("--topology", required=True, help="topology YAML file")
    inspect.add_argument(
        "--dlt",
        default=None,
        help="a DLT of the topology, 'parking' / the parking topic, or any other dead-letter topic by "
        "name (a Kafka Connect or share-group DLQ; default: the main DLT)",
    )
    inspect.add_argument(
        "--family",
        default=None,
        choices=("auto", *FAMILIES),
        help="family of records whose headers name none (airflow: Airflow's Kafka provider writes no "
        "header; kafka-connect: a Connect DLQ without context headers); default: the family the "
        "topology's dead_letter_queues entry of --dlt names, else auto (such records are unknown)",
    )
    inspect.add_argument("--format", choices=("table", "json"), default="table")
    inspect.add_argument(
        "--by", choices=("hour", "day"), default="hour", help="failure-time bucket of the groups"
    )
    inspect.add_argument("--samples", type=int, default=3, help="coordinates shown per group")
    inspect.add_argument(
        "--show-values", action="store_true", help="also show keys and values of the samples"
    )
    add_kafka_args(inspect)
    inspect.set_defaults(func=_cmd_inspect)

    replay = dlt.add_parser("replay", help="move DLT records back, exactly once, with audit headers")
    replay.add_argument("--topology", required=True, help="topology YAML file")
    replay.add_argument(
        "--dlt",
        default=None,
        help="a DLT of the topology, 'parking' / the parking topic, or any other dead-letter topic by "
        "name (a Kafka Connect or share-group DLQ; default: the main DLT)",
    )
    replay.add_argument(
        "--exception",
        action="append",
        default=[],
        metavar="CLASS",
        help="dotted exception class (subclasses match where already loaded; nothing is "
        "imported; repeatable)",
    )
    replay.add_argument("--original-topic", action="append", default=[], metavar="TOPIC", help="repeatable")
    replay.add_argument(
        "--since", default=None, help="failed at or after: epoch ms, ISO-8601 (UTC) or a duration ago (2h)"
    )
    replay.add_argument("--until", default=None, help="failed at or before (same forms as --since)")
    replay.add_argument("--key", action="append", default=[], help="record key, UTF-8 (repeatable)")
    replay.add_argument("--partition", action="append", default=[], help="DLT partition(s), e.g. 0 or 0,2")
    replay.add_argument(
        "--offsets", default=None, metavar="A-B", help="DLT offsets, inclusive (A-B, A- or A)"
    )
    replay.add_argument(
        "--limit", type=int, default=None, metavar="N", help="at most N records, oldest first"
    )
    replay.add_argument(
        "--to",
        default=None,
        metavar="main|first-tier|TOPIC",
        help="target (default: each record's original topic)",
    )
    replay.add_argument(
        "--allow-target",
        action="append",
        default=[],
        metavar="TOPIC",
        help="a topic beyond the topology's main topic and retry tiers that records may be "
        "replayed to (repeatable)",
    )
    replay.add_argument(
        "--framework-headers",
        choices=FRAMEWORK_HEADER_MODES,
        default="auto",
        help="the dead-letter framework's own headers on the copies: auto (default) keeps Spring's "
        "original coordinates and drops Kafka Connect's __connect.errors.* and the share group's "
        "__dlq.errors.*; keep keeps them all; drop drops them all",
    )
    replay.add_argument(
        "--transform",
        default=None,
        metavar="MOD:FUNC",
        help="callable editing each record (return it, edited, or None to leave it out)",
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print exactly what would move, and where; write nothing"
    )
    replay.add_argument(
        "--replay-id",
        default=None,
        help="default: a fresh id (printed); the same id resumes a stopped replay",
    )
    replay.add_argument("--chunk-size", type=int, default=100, help="records per Kafka transaction")
    replay.add_argument(
        "--rate",
        default=None,
        metavar="N/s",
        help="move at most N records per second (N/s or N), in chunks of at most a quarter second's worth",
    )
    replay.add_argument("--format", choices=("json", "text"), default="json")
    add_kafka_args(replay)
    replay.set_defaults(func=_cmd_replay)

    status = dlt.add_parser("replay-status", help="the status of a DLT's replays (read only)")
    status.add_argument("--topology", required=True, help="topology YAML file")
    status.add_argument("--dlt", default=None, help="as dlt replay (default: the main DLT)")
    status.add_argument("--replay-id", default=None, help="one replay (default: every replay of the DLT)")
    status.add_argument("--json", action="store_true", help="print JSON")
    add_kafka_args(status)
    status.set_defaults(func=_cmd_status)

    stop = dlt.add_parser("replay-stop", help="stop a running replay at its next chunk boundary")
    stop.add_argument("--topology", required=True, help="topology YAML file")
    stop.add_argument("--dlt", default=None, help="as dlt replay (default: the main DLT)")
    stop.add_argument("--replay-id", required=True, help="the replay to stop (the same id resumes it)")
    stop.add_argument("--reason", default=None, help="why, for its status")
    stop.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="S",
        help="wait up to S seconds for it to stop (0: no wait)",
    )
    stop.add_argument("--json", action="store_true", help="print its status as JSON")
    add_kafka_args(stop)
    stop.set_defaults(func=_cmd_stop)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.dlt.groups import format_table
    from airflow_kafka_retry.dlt.inspect import inspect_dlt
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.topology)
    report = inspect_dlt(
        topology,
        kafka_config(args),
        dlt=args.dlt,
        bucket=args.by,
        samples=args.samples,
        show_values=args.show_values,
        family=args.family,
    )
    if args.format == "json":
        print_json(report)
    else:
        sys.stdout.write(format_table(report) + "\n")
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.topology)
    request = ReplayRequest(
        dlt=args.dlt,
        exception=args.exception,
        original_topic=args.original_topic,
        since=args.since,
        until=args.until,
        key=args.key,
        partition=args.partition,
        offsets=args.offsets,
        limit=args.limit,
        to=args.to,
        transform=args.transform,
        framework_headers=args.framework_headers,
    )
    replay = Replay(
        topology,
        kafka_config(args),
        request,
        replay_id=args.replay_id,
        dry_run=args.dry_run,
        chunk_size=args.chunk_size,
        allowed_targets=args.allow_target,
        rate=args.rate,
    )
    sys.stderr.write(f"replay id: {replay.replay_id}{' (dry run)' if args.dry_run else ''}\n")
    sys.stderr.flush()
    try:
        summary = replay.run()
    except ReplayAbortedError as exc:
        if replay.summary is not None:
            print_json(replay.summary.to_dict())
        sys.stderr.write(f"airflow-kafka-retry: error: {exc}\n")
        return EXIT_FAILED
    if args.format == "json":
        print_json(summary.to_dict())
    else:
        sys.stdout.write("\n".join(summary.lines()) + "\n")
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.dlt.replay_status import ReplayStatusView, status_lines
    from airflow_kafka_retry.policy.topology.file import load_topology

    view = ReplayStatusView(load_topology(args.topology), kafka_config(args), args.dlt)
    found = view.read(args.replay_id)
    if args.json:
        print_json(found if args.replay_id is None else found[0])
    else:
        lines = [line for status in found for line in status_lines(status)]
        sys.stdout.write("\n".join(lines or [f"no replay in {view.log_topic}"]) + "\n")
    return EXIT_OK


def _cmd_stop(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.dlt.replay_status import ENDED, ReplayStatusView, status_lines
    from airflow_kafka_retry.policy.topology.file import load_topology

    if args.wait < 0:
        return fail(f"--wait {args.wait:g}: give 0 or more seconds")
    view = ReplayStatusView(load_topology(args.topology), kafka_config(args), args.dlt)
    status = view.stop(args.replay_id, reason=args.reason, wait_s=args.wait)
    if args.json:
        print_json(status)
    else:
        sys.stdout.write("\n".join(status_lines(status)) + "\n")
    if status.get("state") in ENDED:
        return EXIT_OK
    sys.stderr.write(
        f"stop requested; replay {args.replay_id} still says {status.get('state')} after {args.wait:g}s: "
        "it stops at its next chunk boundary (see dlt replay-status)\n"
    )
    return EXIT_OK if args.wait == 0 else EXIT_FAILED
