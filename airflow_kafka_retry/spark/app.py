"""
The PySpark application that reprocesses one tier: one Spark task per Kafka partition.

Driver::

    reprocess_tier.py --topology FILE --tier SPEC --options-json JSON|@FILE
                      --kafka-config-file PATH --result PATH|URL [--cutoff-ms MS] [--partitions 0,2]
                      [--allow-unencrypted-secrets]

1. Checks everything it can before reading any record: the options, the topology, the tier, that
   the handler and deserializers import, the Kafka configuration and the tier's topic. Any problem
   ends the run with exit code 2 and a readable message (on stderr and in the result document);
   no Spark job is started and no offset moves.
2. Runs ``sc.parallelize(partitions, len(partitions))``: one task per Kafka partition. Each task
   runs :class:`~airflow_kafka_retry.engine.drain.partition.PartitionJob` on its executor and returns the
   partition summary.
3. Writes the run summary (``engine: spark``) as JSON to ``--result`` (a local path or any fsspec
   URL) and exits 1 if any partition failed, else 0.

A task retried by Spark is safe: the partition's ``transactional.id`` is deterministic per (group,
topic, partition) and offsets are committed inside the transaction, so the retry fences the failed
attempt (aborting whatever it left open) and resumes from the last committed offset. Speculative
execution would run two attempts of a partition at once, so the application turns it off.

The Kafka configuration (which may hold ``sasl.password``) arrives as the PATH of a JSON file,
never on the command line; the public files it names (the CA...) are packed in it, and the driver
and each task write them to a private folder of their own for as long as they need them (see
:mod:`~airflow_kafka_retry.spark.kafka_files`). The driver reads it and hands it to the tasks inside
their serialized closure; it is never logged nor set as a Spark property, so it shows neither in
``ps``, the logs, the event log nor the Spark UI's environment tab. The closure crosses Spark's RPC to reach
executors outside the driver's JVM: once the Spark context is up, the driver refuses to start
tasks carrying secrets unless that RPC is authenticated and encrypted (``spark.authenticate``,
``spark.network.crypto.enabled``) or ``--allow-unencrypted-secrets`` was given (see
:mod:`~airflow_kafka_retry.spark.transport`; the submitting side checks the same before
``spark-submit``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.summary import PartitionSummary, RunSummary
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, check_local_files
from airflow_kafka_retry.engine.kafka.loading import UserCodeError
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.topology.file import load_topology_from
from airflow_kafka_retry.spark.executor_code import import_user_code
from airflow_kafka_retry.spark.kafka_files import materialized
from airflow_kafka_retry.spark.result import (
    UntrustedResultError,
    check_result_path_free,
    error_document,
    write_result,
)
from airflow_kafka_retry.spark.transport import UnencryptedSecretsError, check_secrets_transport

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

log = logging.getLogger(__name__)


class AppInputError(ValueError):
    """An argument of the application is unusable; the message says which and why (never a secret)."""


# ----------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprocess_tier.py", description="Reprocess one retry tier of a Kafka topology with Spark."
    )
    parser.add_argument("--topology", required=True, help="topology YAML file (local path or fsspec URL)")
    parser.add_argument("--tier", required=True, help="tier index (0 = main topic), a topic name, or 'dlt'")
    parser.add_argument(
        "--options-json",
        required=True,
        help="the run options (DrainOptions) as inline JSON, or @FILE holding them",
    )
    parser.add_argument(
        "--kafka-config-file",
        required=True,
        help="JSON file with the librdkafka configuration (may hold credentials; never inline)",
    )
    parser.add_argument("--result", required=True, help="where to write the run summary (path or fsspec URL)")
    parser.add_argument(
        "--cutoff-ms",
        type=int,
        default=None,
        help="records due after this epoch-ms time stay for a later run (default: now)",
    )
    parser.add_argument("--partitions", default=None, help="comma-separated partitions (default: all)")
    parser.add_argument(
        "--allow-unencrypted-secrets",
        action="store_true",
        help="let Kafka secrets reach executors over unauthenticated, unencrypted Spark RPC",
    )
    return parser


# ----------------------------------------------------------------------------- driver checks
@dataclass(frozen=True)
class TierRun:
    """Everything the tasks of one tier run need, checked on the driver."""

    topology: Topology
    tier: Tier
    options: DrainOptions
    kafka_config: Mapping[str, Any] = dataclasses.field(repr=False)  # may hold credentials: never in repr
    partitions: tuple[int, ...]
    cutoff_ms: int
    started_ms: int


def options_from_json(value: str) -> DrainOptions:
    """DrainOptions from inline JSON or ``@FILE``; an AppInputError names unknown or invalid options."""
    text = value
    if value.startswith("@"):
        try:
            text = _read_text(value[1:])
        except OSError as exc:
            raise AppInputError(f"cannot read the options file {value[1:]}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AppInputError(
            f"--options-json is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise AppInputError("--options-json must be a JSON object of DrainOptions fields")
    known = {f.name for f in dataclasses.fields(DrainOptions)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise AppInputError(
            f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(known))}"
        )
    if "handler" not in data:
        raise AppInputError("the options name no handler ('package.module:function')")
    return DrainOptions(**data)


def read_kafka_config(path: str) -> dict[str, Any]:
    """
    The librdkafka configuration from the JSON file at ``path``; errors never quote its content.

    In cluster deploy mode the file ships with ``--files`` and sits in the driver's working
    directory under its own name, so that is tried when ``path`` does not exist -- only if it
    belongs to this process's user: a file another user left in a shared working directory could
    point the run at their broker.
    """
    candidates = [path, os.path.basename(path)]
    found = next((p for p in candidates if os.path.isfile(p)), None)
    if found is None:
        raise AppInputError(f"the Kafka configuration file {path} does not exist")
    if found != path and os.stat(found).st_uid != os.geteuid():
        raise AppInputError(
            f"the Kafka configuration file {path} does not exist, and {os.path.abspath(found)} "
            "belongs to another user"
        )
    try:
        with open(found, encoding="utf-8") as fh:
            config = json.load(fh)
    except json.JSONDecodeError as exc:
        raise AppInputError(
            f"the Kafka configuration file {path} is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    except OSError as exc:
        raise AppInputError(
            f"cannot read the Kafka configuration file {path}: {exc.strerror or exc}"
        ) from None
    if not isinstance(config, dict):
        raise AppInputError(f"the Kafka configuration file {path} must hold a JSON object")
    if "bootstrap.servers" not in config:
        raise AppInputError(f"the Kafka configuration in {path} has no 'bootstrap.servers'")
    return config


def choose_partitions(run_partitions: Sequence[int], requested: str | None, topic: str) -> tuple[int, ...]:
    """All of the topic's partitions, or the requested ones (each must exist)."""
    if not requested:
        return tuple(run_partitions)
    try:
        chosen = tuple(sorted({int(p) for p in requested.split(",") if p.strip()}))
    except ValueError:
        raise AppInputError(f"--partitions must be comma-separated integers, got {requested!r}") from None
    missing = [p for p in chosen if p not in run_partitions]
    if missing or not chosen:
        raise AppInputError(
            f"{topic} has partitions 0..{len(run_partitions) - 1}; cannot reprocess {missing or requested!r}"
        )
    return chosen


def prepare(args: argparse.Namespace, started_ms: int) -> TierRun:
    """Every driver-side check, in the order that touches nothing first; the last one asks Kafka."""
    from airflow_kafka_retry.engine.local.engine import tier_partitions

    check_result_path_free(args.result)
    options = options_from_json(args.options_json)
    topology = load_topology_from(args.topology)
    tier = topology.select(args.tier)
    import_user_code(options, on_executor=False)  # a typo fails the run before any record is read
    kafka_config = read_kafka_config(args.kafka_config_file)  # the files it carries stay packed for the tasks
    where = f"on the driver's host {socket.gethostname()!r}"
    with materialized(kafka_config, where) as driver_config:
        check_local_files(driver_config, where)
        run_partitions = tier_partitions(topology, tier, driver_config, options)
    partitions = choose_partitions(run_partitions, args.partitions, tier.topic)
    cutoff = started_ms if args.cutoff_ms is None else args.cutoff_ms
    return TierRun(topology, tier, options, kafka_config, partitions, cutoff, started_ms)


# ----------------------------------------------------------------------------- executor side
def _configure_worker_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)


def run_partition(
    topology: Topology,
    tier: Tier,
    options: dict[str, Any],
    kafka_config: Mapping[str, Any],
    cutoff_ms: int,
    partition: int,
) -> dict[str, Any]:
    """
    Spark task body: reprocess one partition on the executor and return its summary as a dict.

    Never raises for a partition failure (the summary says ``failed``); a crash of the worker
    process makes Spark retry the task, which resumes from the committed offset.
    """
    from airflow_kafka_retry.engine.drain.supervisor import run_partition

    _configure_worker_logging()
    drain_options = DrainOptions(**options)
    try:
        import_user_code(drain_options)  # a module missing on this executor: say which, and how to ship it
        where = f"on executor host {socket.gethostname()!r}"
        with materialized(kafka_config, where) as config:  # the CA... the submission carried, for this task
            check_local_files(config, where)
            summary = run_partition(topology, tier, partition, config, drain_options, cutoff_ms=cutoff_ms)
    except Exception as exc:  # reported in the summary like any partition failure
        group = drain_options.consumer_group or topology.consumer_group(tier)
        summary = PartitionSummary(
            tier.topic, partition, group, status="failed", error=f"{type(exc).__name__}: {exc}"
        )
    return summary.to_dict()


# ----------------------------------------------------------------------------- driver: Spark
def _spark_context(run: TierRun) -> Any:
    from pyspark import SparkConf, SparkContext

    conf = SparkConf()
    conf.setIfMissing("spark.app.name", f"airflow-kafka-retry {run.tier.topic}")
    if conf.get("spark.speculation", "false").lower() == "true":
        log.warning(
            "spark.speculation is turned off: two attempts of one Kafka partition must not run at once"
        )
    conf.set("spark.speculation", "false")
    return SparkContext.getOrCreate(conf=conf)


def _short_error(exc: BaseException, limit: int = 600) -> str:
    """The first meaningful line of a (possibly Java) error, for the summary."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = next(
        (line for line in lines if "Job aborted" in line), lines[0] if lines else type(exc).__name__
    )
    return chosen[:limit]


def run_on_spark(sc: Any, run: TierRun) -> RunSummary:
    """One task per partition; every task's summary collected into the run summary."""
    group = run.options.consumer_group or run.topology.consumer_group(run.tier)
    summary = RunSummary(
        topology=run.topology.source,
        tier=run.tier.index,
        topic=run.tier.topic,
        group=group,
        engine="spark",
        cutoff_ms=run.cutoff_ms,
        started_ms=run.started_ms,
    )
    task = functools.partial(
        run_partition, run.topology, run.tier, run.options.to_dict(), dict(run.kafka_config), run.cutoff_ms
    )
    sc.setJobDescription(
        f"reprocess {run.tier.topic} (tier {run.tier.index}): {len(run.partitions)} partitions"
    )
    try:
        results = sc.parallelize(list(run.partitions), len(run.partitions)).map(task).collect()
        summary.partitions = [PartitionSummary.from_dict(r) for r in results]
    except Exception as exc:  # the Spark job gave up (task retries exhausted)
        error = f"Spark job failed: {_short_error(exc)}"
        log.error("%s: %s", run.tier.topic, error)
        summary.partitions = [
            PartitionSummary(run.tier.topic, p, group, status="failed", error=error) for p in run.partitions
        ]
    summary.finished_ms = wall_clock_ms()
    summary.note_stops()  # options.deadline_ms stops partitions at a chunk boundary
    return summary


# ----------------------------------------------------------------------------- main
def _read_text(url: str) -> str:
    import fsspec

    with fsspec.open(url, "r", encoding="utf-8") as fh:
        return fh.read()


def _refuse(result_url: str, message: str) -> int:
    log.error("refusing to start: %s", message)
    sys.stderr.write(f"airflow-kafka-retry spark app: error: {message}\n")
    try:
        write_result(result_url, error_document(message))
    except Exception as exc:  # the exit code and stderr still say what happened
        log.error("cannot write the result to %s: %s", result_url, exc)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    """Run the application; returns the process exit code (0 ok, 1 a partition failed, 2 bad input)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    args = build_parser().parse_args(argv)
    started = wall_clock_ms()
    try:
        run = prepare(args, started)
    except (TopologyError, UserCodeError, KafkaConfigError, AppInputError, UntrustedResultError) as exc:
        return _refuse(args.result, str(exc))
    except (ValueError, OSError) as exc:
        return _refuse(args.result, f"{type(exc).__name__}: {exc}")
    log.info(
        "reprocessing %s (tier %s) partitions %s, cutoff %s",
        run.tier.topic,
        run.tier.index,
        list(run.partitions),
        run.cutoff_ms,
    )
    sc = _spark_context(run)
    try:
        check_secrets_transport(
            run.kafka_config,
            master=sc.master,
            spark_conf=dict(sc.getConf().getAll()),
            allow_unencrypted_secrets=args.allow_unencrypted_secrets,
            where=" in the Spark configuration the driver runs with",
        )
    except UnencryptedSecretsError as exc:
        sc.stop()
        return _refuse(args.result, str(exc))
    try:
        summary = run_on_spark(sc, run)
    finally:
        sc.stop()
    document = summary.to_dict()
    write_result(args.result, document)
    log.info("%s: %s; summary written to %s", run.tier.topic, json.dumps(document["totals"]), args.result)
    for failed in summary.failed_partitions:
        log.error("%s[%s] failed: %s", failed.topic, failed.partition, failed.error)
    return EXIT_OK if summary.ok else EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
