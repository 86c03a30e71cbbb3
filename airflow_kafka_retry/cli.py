"""
``airflow-kafka-retry``: broker | topology show/create-topics/acls | drain | dlt | ordering | demo.

Exit codes: 0 success, 1 the run failed (a partition failed), 2 bad input (topology, options).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_kafka_retry.cli_acls import add_acls_command
from airflow_kafka_retry.cli_support import (
    EXIT_FAILED,
    EXIT_OK,
    add_kafka_args,
    fail,
    kafka_config,
    print_json,
)
from airflow_kafka_retry.policy.errors import TopologyError


def _echo_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")


def _cmd_broker(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.sandbox.broker import run_broker_cli

    if args.nodes != 1 and not args.kafka:
        return fail("--nodes needs --kafka: the embedded Tansu broker runs one node")
    if args.nodes != 1 and args.port is not None:
        return fail("--port names one broker's port; a cluster (--nodes) picks free ports")
    if (args.secure or args.user) and (not args.kafka or args.nodes != 1 or args.port is not None):
        return fail("--secure (and --user) need --kafka, one node and no --port")
    return run_broker_cli(args.port, kafka=args.kafka, nodes=args.nodes, secure=args.secure, users=args.user)


def _cmd_demo(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.demo import main as demo_main

    return demo_main(
        args.bootstrap,
        orders=args.orders,
        partitions=args.partitions,
        fast=args.fast,
        out_dir=args.out,
        kafka=args.kafka,
        postgres=args.postgres,
        screenshot=args.screenshot,
    )


def _cmd_topology_show(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.file)
    shown = topology.to_dict()
    if args.bootstrap or args.kafka_config:
        import yaml

        from airflow_kafka_retry.engine.kafka.topic_admin import (
            existing_topics,
            topology_replication_warnings,
        )
        from airflow_kafka_retry.policy.topology.compat_check import spring_named_topics, warning

        config = kafka_config(args)
        data = yaml.safe_load(Path(args.file).read_text(encoding="utf-8"))
        found = spring_named_topics(data, existing_topics(config))
        shown["spring_named_topics"] = found
        message = warning(found)
        if message:
            print(f"warning: {args.file}: {message}", file=sys.stderr)
        shown["replication_warnings"] = topology_replication_warnings(topology, config)
        for line in shown["replication_warnings"]:
            print(f"warning: {args.file}: {line}", file=sys.stderr)
        shown["peer_consumers"] = _peer_consumers(topology, config, args.file)
    print_json(shown)
    return EXIT_OK


def _peer_consumers(topology: Any, config: dict[str, Any], file: str) -> list[dict[str, Any]] | None:
    """Other consumers on the topology's topics (a Spring peer), each warned about; None if not checked."""
    from confluent_kafka import KafkaException

    from airflow_kafka_retry.engine.scans.peer_consumers import peer_consumers, warnings

    try:
        peers = peer_consumers(topology, config)
    except (KafkaException, TimeoutError) as exc:
        print(f"warning: {file}: consumer groups not checked for Spring peers: {exc}", file=sys.stderr)
        return None
    for line in warnings(peers):
        print(f"warning: {file}: {line}", file=sys.stderr)
    return [p.to_dict() for p in peers]


def _cmd_topology_create(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.file)
    print_json(
        ensure_topics(
            topology,
            kafka_config(args),
            partitions=args.partitions,
            replication_factor=args.replication_factor,
        )
    )
    return EXIT_OK


def _options(args: argparse.Namespace) -> Any:
    from airflow_kafka_retry.engine.drain.options import DrainOptions

    return DrainOptions(
        handler=args.handler,
        value_deserializer=args.value_deserializer,
        key_deserializer=args.key_deserializer,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        max_records=args.max_records,
        in_place_attempts=args.in_place_attempts,
        in_place_backoff_ms=args.in_place_backoff_ms,
        transactional=not args.no_transactions,
        consumer_group=args.group,
        handler_timeout_s=args.handler_timeout,
        call_timeout_s=args.call_timeout,
        broker_retry_s=args.broker_retry,
    )


def _spark_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf {pair!r} must be KEY=VALUE")
        conf[key] = value
    return conf


def _cmd_drain(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.engine.kafka.loading import load_callable
    from airflow_kafka_retry.policy.topology.file import load_topology

    topology = load_topology(args.topology)
    tier = topology.select(args.tier)
    options = _options(args)
    config = kafka_config(args)
    partitions = [int(p) for p in args.partitions.split(",")] if args.partitions else None
    if args.engine == "spark":
        from airflow_kafka_retry.spark.submit import SparkSubmitError, run_spark_submit

        echo = _echo_stderr if args.verbose else None
        try:
            summary = run_spark_submit(
                topology_path=args.topology,
                tier=args.tier,
                options=options,
                kafka_config=config,
                master=args.master,
                cutoff_ms=args.cutoff_ms,
                partitions=partitions,
                on_output=echo,
                conf=_spark_conf(args.conf),
                allow_unencrypted_secrets=args.allow_unencrypted_secrets,
            )
        except SparkSubmitError as exc:
            return fail(str(exc), EXIT_FAILED)
    else:
        from airflow_kafka_retry.engine.local.engine import run_local

        for path, what in (
            (options.handler, "handler"),
            (options.value_deserializer, "value_deserializer"),
            (options.key_deserializer, "key_deserializer"),
        ):
            if path:
                load_callable(path, what=what)  # fail before reading any record
        summary = run_local(
            topology,
            tier,
            config,
            options,
            partitions=partitions,
            cutoff_ms=args.cutoff_ms,
            parallelism=args.parallelism,
            in_process=args.in_process,
        )
    print_json(summary.to_dict())
    return EXIT_OK if summary.ok else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airflow-kafka-retry", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    broker = sub.add_parser(
        "broker",
        help="start a local broker (embedded Tansu, or Apache Kafka with --kafka), print its address, "
        "serve until Ctrl-C or SIGTERM",
    )
    broker.add_argument("--port", type=int, default=None, help="loopback port (default: a free one)")
    broker.add_argument(
        "--kafka",
        action="store_true",
        help="a real single-node Apache Kafka (KRaft) from its Maven Central jars (needs Java 17+ and mvn; "
        "the jars are cached in ~/.cache/airflow-kafka-retry)",
    )
    broker.add_argument(
        "--nodes",
        type=int,
        default=1,
        choices=range(1, 10),
        metavar="N",
        help="with --kafka: a KRaft cluster of N nodes (broker and controller each; replication factor 3, "
        "min ISR 2); the first line is then the comma-separated bootstrap list (default 1)",
    )
    broker.add_argument(
        "--secure",
        action="store_true",
        help="with --kafka: SASL_SSL SCRAM-SHA-512 over TLS (a throw-away CA), ACLs enforced, a super user "
        "admin; prints each user's client configuration file (0600), never a password",
    )
    broker.add_argument(
        "--user", action="append", default=[], help="with --secure: a user to create (repeatable)"
    )
    broker.set_defaults(func=_cmd_broker)

    demo = sub.add_parser("demo", help="run the retry path end to end through Airflow on an embedded broker")
    demo.add_argument("--orders", type=int, default=200)
    demo.add_argument("--partitions", type=int, default=3)
    demo_broker = demo.add_mutually_exclusive_group()
    demo_broker.add_argument(
        "--bootstrap", default=None, help="use this cluster instead of an embedded broker"
    )
    demo_broker.add_argument(
        "--kafka",
        action="store_true",
        help="start a real single-node Apache Kafka from its Maven Central jars instead of the embedded "
        "Tansu broker (needs Java 17+ and mvn; the jars are cached in ~/.cache/airflow-kafka-retry)",
    )
    demo.add_argument(
        "--fast",
        action="store_true",
        help="run the DAGs with `airflow dags test` in schedule order instead of the scheduler (CI)",
    )
    demo.add_argument("--out", default=None, help="working directory (default: .artifacts/demo/<time>)")
    demo.add_argument(
        "--postgres",
        action="store_true",
        help="Airflow's metadata DB on a private PostgreSQL server (Debian's postgresql) instead of SQLite",
    )
    demo.add_argument(
        "--screenshot",
        default=None,
        metavar="PNG",
        help="save a picture of the Retry tiers view while records wait in the tiers (scheduler demo; "
        "needs Chromium and Playwright)",
    )
    demo.set_defaults(func=_cmd_demo)

    topology = sub.add_parser("topology", help="inspect a retry topology").add_subparsers(
        dest="action", required=True
    )
    show = topology.add_parser("show", help="print the resolved retry path as JSON")
    show.add_argument("file")
    add_kafka_args(show)  # optional: with a cluster, warns about Spring-named topics under compat: none
    show.set_defaults(func=_cmd_topology_show)
    create = topology.add_parser("create-topics", help="create the topology's missing topics")
    create.add_argument("file")
    create.add_argument("--partitions", type=int, required=True)
    create.add_argument("--replication-factor", type=int, default=-1)
    add_kafka_args(create)
    create.set_defaults(func=_cmd_topology_create)
    add_acls_command(topology)

    drain = sub.add_parser("drain", help="reprocess the due records of one tier and print the run summary")
    drain.add_argument("--topology", required=True, help="topology YAML file")
    drain.add_argument("--tier", required=True, help="tier index (0 = main topic), a topic name, or 'dlt'")
    drain.add_argument("--handler", required=True, help="package.module:function")
    drain.add_argument("--value-deserializer", default=None, help="package.module:function (default: bytes)")
    drain.add_argument("--key-deserializer", default=None)
    drain.add_argument("--engine", choices=("local", "spark"), default="local")
    drain.add_argument("--master", default="local[2]", help="Spark master for --engine spark")
    drain.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark property for --engine spark (repeatable; never put credentials here)",
    )
    drain.add_argument(
        "--allow-unencrypted-secrets",
        action="store_true",
        help="--engine spark with a non-local master: send Kafka secrets to executors even though "
        "spark.authenticate and spark.network.crypto.enabled are not both true",
    )
    drain.add_argument("--batch-size", type=int, default=100)
    drain.add_argument("--chunk-size", type=int, default=5000, help="records per Kafka transaction")
    drain.add_argument("--max-records", type=int, default=None, help="per partition")
    drain.add_argument("--in-place-attempts", type=int, default=0)
    drain.add_argument("--in-place-backoff-ms", type=int, default=0)
    drain.add_argument("--no-transactions", action="store_true", help="idempotent produce, then commit")
    drain.add_argument(
        "--handler-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail a handler call that runs longer (its record is isolated and routed as a failure)",
    )
    drain.add_argument(
        "--call-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="timeout of each Kafka call that can block; the engine abandons one still waiting 5 s later "
        "and tries the partition again with fresh clients (default 20)",
    )
    drain.add_argument(
        "--broker-retry",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long after a partition's first broker failure it is tried again within the run; then it "
        "fails naming the call and the broker it waited for (default 30; 0: never)",
    )
    drain.add_argument("--group", default=None, help="override the tier's consumer group")
    drain.add_argument("--partitions", default=None, help="comma-separated partitions (default: all)")
    drain.add_argument(
        "--parallelism",
        type=int,
        default=None,
        help="partitions at once (local engine; default: cores + 1, at most 8); above one, "
        "they run in worker processes, one per core at most",
    )
    drain.add_argument(
        "--in-process",
        action="store_true",
        help="run partitions in threads of this process (local engine; record work then uses one core)",
    )
    drain.add_argument("--cutoff-ms", type=int, default=None, help="due-time cutoff, epoch ms (default: now)")
    add_kafka_args(drain)
    drain.set_defaults(func=_cmd_drain)

    from airflow_kafka_retry.dlt.cli import add_dlt_commands

    add_dlt_commands(sub)
    from airflow_kafka_retry.ordering.cli import add_ordering_commands

    add_ordering_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except TopologyError as exc:
        return fail(str(exc))
    except (ValueError, OSError) as exc:
        return fail(f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
