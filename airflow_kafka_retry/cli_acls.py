"""
``airflow-kafka-retry topology acls FILE``: the Kafka ACL bindings each role needs, printed or applied.

The bindings come from :mod:`airflow_kafka_retry.policy.topology.acl`; this module only parses the options,
prints them as ``kafka-acls.sh`` lines or JSON and, with ``--apply``, creates them with an admin
configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from airflow_kafka_retry.cli_support import EXIT_FAILED, EXIT_OK, fail, print_json
from airflow_kafka_retry.policy.topology.acl import (
    ROLES,
    AclScope,
    acl_bindings,
    as_commands,
    as_table,
    principals_for,
)


def add_acls_command(topology: Any) -> None:
    """Add ``acls`` to the ``topology`` sub-commands."""
    acls = topology.add_parser(
        "acls",
        help="print (or --apply) the Kafka ACL bindings each role needs for this topology",
        description="Least privilege per role: setup, tiers (tier runs), watcher (triggerer), dlt_watch, "
        "view (api-server), replay. Each role is a principal of its own (User:<role> unless --principal).",
    )
    acls.add_argument("file")
    acls.add_argument("--role", action="append", choices=ROLES, default=None, help="only these (repeatable)")
    acls.add_argument(
        "--principal", action="append", default=[], metavar="ROLE=User:NAME", help="a role's principal"
    )
    acls.add_argument("--format", choices=("commands", "json", "table"), default="commands")
    acls.add_argument(
        "--include-main",
        action="store_true",
        help="the tier runs drain the main topic too (always so with an input or ordering: key)",
    )
    acls.add_argument(
        "--transactional-id-prefix",
        default=None,
        help="the drain options' prefix (default airflow-kafka-retry.)",
    )
    acls.add_argument(
        "--allow-target",
        action="append",
        default=[],
        metavar="TOPIC",
        help="a replay target besides the tiers",
    )
    acls.add_argument(
        "--source-topic",
        action="append",
        default=[],
        metavar="TOPIC",
        help="on_due: redeliver: a share group source topic the tier runs write back to",
    )
    acls.add_argument(
        "--watch-group", default=None, help="the DLT watch's group (default <group_id>-dlt-watch)"
    )
    acls.add_argument(
        "--bootstrap", default=None, help="bootstrap servers (printed commands; --apply: the cluster)"
    )
    acls.add_argument("--apply", action="store_true", help="create the bindings (needs --admin-config)")
    acls.add_argument(
        "--admin-config",
        default=None,
        metavar="FILE",
        help="JSON file with the librdkafka settings of a principal allowed to create ACLs",
    )
    acls.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="--apply's deadline")
    acls.set_defaults(func=_cmd_acls)


def _cmd_acls(args: argparse.Namespace) -> int:
    from airflow_kafka_retry.policy.client_names import DEFAULT_TRANSACTIONAL_ID_PREFIX
    from airflow_kafka_retry.policy.topology.file import load_topology

    if args.apply and not args.admin_config:
        return fail("--apply needs --admin-config FILE (the credentials of a principal that may create ACLs)")
    topology = load_topology(args.file)
    scope = AclScope(
        include_main=args.include_main,
        transactional_id_prefix=args.transactional_id_prefix or DEFAULT_TRANSACTIONAL_ID_PREFIX,
        replay_targets=tuple(args.allow_target),
        source_topics=tuple(args.source_topic),
        watch_group=args.watch_group,
    )
    bindings = acl_bindings(topology, scope, roles=args.role or ROLES)
    principals = principals_for(args.principal)
    bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "BOOTSTRAP"
    if args.format == "json":
        print_json([b.to_dict(principals[b.role]) for b in bindings])
    else:
        table = args.format == "table"
        lines = as_table(bindings, principals) if table else as_commands(bindings, principals, bootstrap)
        sys.stdout.write("".join(line + "\n" for line in lines))
    if not args.apply:
        return EXIT_OK
    from airflow_kafka_retry.engine.kafka.acl_admin import AclApplyError, apply_acls

    with open(args.admin_config, encoding="utf-8") as fh:
        config: dict[str, Any] = json.load(fh)
    if args.bootstrap:
        config["bootstrap.servers"] = args.bootstrap
    try:
        created = apply_acls(bindings, principals, config, timeout=args.timeout)
    except AclApplyError as exc:
        return fail(str(exc), EXIT_FAILED)
    sys.stderr.write(f"airflow-kafka-retry: {created} ACL binding(s) created\n")
    return EXIT_OK
