"""
The Kafka ACL bindings each use of a topology needs, and nothing more: least privilege as data.

Every name comes from the code that gives it to the clients: the tiers and their groups from the
:class:`~.topology.model.Topology`, the transactional ids, log topics and the DLT watch's group from
:mod:`.client_names`. So the bindings cannot drift from what the engine does, and
``airflow-kafka-retry topology acls`` prints (or applies) them.

The roles (one principal, one connection each; docs/security.md):

* ``setup``: creates the path's topics (``ensure_topics``, ``topology create-topics``).
* ``tiers``: the tier runs (workers, Spark executors): reads a tier, writes where its failures go, commits
  in its own transactions.
* ``watcher``: the triggerer's watchers: the tiers' heads and the groups' committed offsets.
* ``dlt_watch``: the DLT watch task: reads the dead-letter topics, commits its own group.
* ``view``: the "Retry tiers" view: reads every topic of the path, the groups' offsets and the replay logs (a
  DLT page's dry run and redrives' status); it writes nothing. A replay log is what the tier runs read to
  trust a replayed record, so a DLT page's *Stop* writes through a connection of the ``replay`` role
  (``[kafka_retry] redrive_kafka_conn_id``), never the view's.
* ``replay``: a DLT replay (the replay DAG or the CLI): reads a DLT or the parking topic, writes the targets
  and the replay log, in the replay's own transaction; ``dlt replay-stop`` and a DLT page's *Stop*; with
  ``redrive`` policies (their rounds are replays) it also writes the parking topic.

Under ``ordering: key`` (docs/ordering.md) the main topic is always drained; its run (the keeper) reads and
writes the hold and state topics, every tier run writes its marks to the hold topic, the watcher reads the
hold topic (a mark starts the keeper), the view reads the state topic, the setup creates both.

Only what Kafka does not imply is listed: ``READ``, ``WRITE`` imply ``DESCRIBE`` on the same resource,
so a binding removed always takes something away. Kafka before 3.0 also needs ``IDEMPOTENT_WRITE`` on the
cluster for the two roles that produce (``tiers``, ``replay``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.policy.client_names import (
    DEFAULT_TRANSACTIONAL_ID_PREFIX,
    READER_GROUP_PREFIX,
    redelivery_log_name,
    replay_log_name,
    replay_transactional_id,
    tier_transactional_prefix,
    watch_group,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

Role = Literal["setup", "tiers", "watcher", "dlt_watch", "view", "replay"]
ROLES: tuple[Role, ...] = ("setup", "tiers", "watcher", "dlt_watch", "view", "replay")
ResourceType = Literal["topic", "group", "transactional_id"]
PatternType = Literal["literal", "prefixed"]
Operation = Literal["READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS"]


@dataclass(frozen=True, order=True)
class AclBinding:
    """
    One ALLOW binding for one role: ``operation`` on the resource (``pattern``: literal or prefixed).

    ``why`` says what needs it (it does not take part in equality).
    """

    role: Role
    resource_type: ResourceType
    name: str
    pattern: PatternType
    operation: Operation
    why: str = field(default="", compare=False)

    def resource(self) -> str:
        """``topic 'orders'`` / ``group prefix 'airflow-kafka-retry.reader.'``: for messages."""
        kind = self.resource_type.replace("_", " ")
        return f"{kind}{' prefix' if self.pattern == 'prefixed' else ''} {self.name!r}"

    def to_dict(self, principal: str) -> dict[str, str]:
        return {
            "role": self.role,
            "principal": principal,
            "resource_type": self.resource_type,
            "name": self.name,
            "pattern_type": self.pattern,
            "operation": self.operation,
            "permission": "ALLOW",
            "host": "*",
            "why": self.why,
        }


@dataclass(frozen=True)
class AclScope:
    """
    What the topology alone does not say about who touches what.

    :param include_main: the topology DAG drains the main topic too (``include_main``; always so with an
        ``input``: its tier 0 is the DLQ the provider drains).
    :param transactional_id_prefix: the drain and replay options' ``transactional_id_prefix``.
    :param replay_targets: topics a replay may write besides the main topic and the retry tiers (its
        ``allowed_targets`` / ``--allow-target``).
    :param source_topics: with ``on_due: redeliver``, the share group's source topics the tiers redeliver
        to (a dead letter names its source; only these are granted).
    :param watch_group: the DLT watch's group (default ``<group_id>-dlt-watch``).
    """

    include_main: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    replay_targets: tuple[str, ...] = ()
    source_topics: tuple[str, ...] = ()
    watch_group: str | None = None


def acl_bindings(
    topology: Topology, scope: AclScope | None = None, *, roles: Iterable[Role] = ROLES
) -> list[AclBinding]:
    """The bindings of ``roles`` for ``topology``, each once, in role order then as derived."""
    scope = scope or AclScope()
    wanted = list(roles)
    unknown = [r for r in wanted if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(map(repr, unknown))}; roles are {', '.join(ROLES)}")
    if topology.on_due == "redeliver" and not scope.source_topics and "tiers" in wanted:
        raise ValueError(
            f"{topology.source}: on_due: redeliver writes each record back to its share group's source "
            "topic, which the topology does not name: give the source topics (--source-topic TOPIC) so the "
            "tier runs are granted WRITE on exactly those"
        )
    builders = {
        "setup": _setup,
        "tiers": _tiers,
        "watcher": _watcher,
        "dlt_watch": _dlt_watch,
        "view": _view,
        "replay": _replay,
    }
    seen: dict[AclBinding, AclBinding] = {}
    for role in wanted:
        for binding in builders[role](topology, scope):
            seen.setdefault(binding, binding)
    return list(seen.values())


def drained_tiers(topology: Topology, scope: AclScope) -> tuple[Tier, ...]:
    """
    The tiers the topology's runs drain: the retry tiers, and tier 0 with ``include_main``, or unasked.

    Unasked: with an ``input`` or ``ordering: key`` the factory drains the main topic (tier 0) itself.
    """
    with_main = scope.include_main or topology.input is not None or topology.ordering == "key"
    return topology.tiers if with_main else topology.retry_tiers


def _path_topics(topology: Topology) -> list[str]:
    parking = [topology.parking_topic] if topology.parking_topic else []
    return [t.topic for t in (*topology.tiers, *topology.dlt_tiers)] + parking


def _replay_sources(topology: Topology) -> list[str]:
    parking = [topology.parking_topic] if topology.parking_topic else []
    return [t.topic for t in topology.dlt_tiers] + parking


def _setup(topology: Topology, scope: AclScope) -> list[AclBinding]:
    out = []
    created = [t for t in _path_topics(topology) if topology.input is None or t != topology.input.dlq]
    for topic in created:
        out.append(AclBinding("setup", "topic", topic, "literal", "DESCRIBE", "see whether it exists"))
        out.append(AclBinding("setup", "topic", topic, "literal", "CREATE", "create it when missing"))
        out.append(
            AclBinding("setup", "topic", topic, "literal", "DESCRIBE_CONFIGS", "size the tiers like tier 0")
        )
    for topic in _order_topics(topology):
        out.append(AclBinding("setup", "topic", topic, "literal", "DESCRIBE", "see whether it exists"))
        out.append(AclBinding("setup", "topic", topic, "literal", "CREATE", "create it when missing"))
        out.append(
            AclBinding("setup", "topic", topic, "literal", "DESCRIBE_CONFIGS", "check its cleanup.policy")
        )
    return out


def _order_topics(topology: Topology) -> list[str]:
    """The hold and state topics (``ordering: key``); none otherwise."""
    return [t for t in (topology.hold_topic, topology.order_state_topic) if t is not None]


def _ordering_bindings(topology: Topology, tier: Tier) -> list[AclBinding]:
    """Under ``ordering: key``: a tier run's marks; the main run (the keeper) reads them, and the state."""
    hold, state = topology.hold_topic, topology.order_state_topic
    if hold is None or state is None:
        return []
    out = [AclBinding("tiers", "topic", hold, "literal", "WRITE", f"tier {tier.index}'s marks, held copies")]
    if tier.index == 0:
        out.append(AclBinding("tiers", "topic", hold, "literal", "READ", "the keeper: marks, held copies"))
        out.append(AclBinding("tiers", "topic", state, "literal", "READ", "the keeper: the blocked keys"))
        out.append(AclBinding("tiers", "topic", state, "literal", "WRITE", "the keeper: the blocked keys"))
    return out


def tier_run_bindings(
    topology: Topology, tier: Tier, scope: AclScope, *, group: str | None = None
) -> list[AclBinding]:
    """What one tier's run needs (``group``: the run's group when it overrides the tier's)."""
    group = group or topology.consumer_group(tier)
    txn = tier_transactional_prefix(scope.transactional_id_prefix, group)
    out = [
        AclBinding("tiers", "topic", tier.topic, "literal", "READ", f"drain tier {tier.index}"),
        AclBinding("tiers", "group", group, "literal", "READ", f"commit tier {tier.index}"),
        AclBinding("tiers", "transactional_id", txn, "prefixed", "WRITE", f"tier {tier.index}'s chunks"),
    ]
    for topic in topology.destinations_from(tier):
        out.append(
            AclBinding("tiers", "topic", topic, "literal", "WRITE", f"route tier {tier.index}'s failures")
        )
    for source in _replay_sources(topology):  # a replayed record that fails again: was it really replayed?
        log = replay_log_name(source)
        out.append(AclBinding("tiers", "topic", log, "literal", "READ", "trust a replayed record"))
    if topology.dlt_tiers:
        out.append(
            AclBinding("tiers", "group", READER_GROUP_PREFIX, "prefixed", "READ", "read the replay logs")
        )
    return out + _ordering_bindings(topology, tier)


def _tiers(topology: Topology, scope: AclScope) -> list[AclBinding]:
    out = []
    for tier in drained_tiers(topology, scope):
        out += tier_run_bindings(topology, tier, scope)
    if topology.on_due == "redeliver":
        log = redelivery_log_name(topology.topic)
        for operation in ("READ", "WRITE", "CREATE"):
            out.append(AclBinding("tiers", "topic", log, "literal", operation, "the redelivery log"))
        for topic in scope.source_topics:
            out.append(AclBinding("tiers", "topic", topic, "literal", "WRITE", "redeliver to the source"))
    return out


def _watcher(topology: Topology, scope: AclScope) -> list[AclBinding]:
    out = []
    for tier in drained_tiers(topology, scope):
        out.append(AclBinding("watcher", "topic", tier.topic, "literal", "READ", "the tier's head"))
        group = topology.consumer_group(tier)
        out.append(AclBinding("watcher", "group", group, "literal", "DESCRIBE", "the tier's committed"))
    if topology.hold_topic is not None:
        out.append(AclBinding("watcher", "topic", topology.hold_topic, "literal", "READ", "marks start main"))
    for tier in topology.dlt_tiers:
        out.append(AclBinding("watcher", "topic", tier.topic, "literal", "READ", "the DLT's head"))
    if topology.dlt_tiers:  # the DLT lane also watches these once they exist (operators/dlt_watch.py)
        parking = [topology.parking_topic] if topology.parking_topic else []
        for topic in [*parking, *topology.dead_letter_queue_topics]:
            out.append(AclBinding("watcher", "topic", topic, "literal", "READ", "new dead letters"))
    if topology.dlt_tiers:
        group = scope.watch_group or watch_group(topology.group_id)
        out.append(AclBinding("watcher", "group", group, "literal", "DESCRIBE", "the DLT watch's committed"))
    return out


def _dlt_watch(topology: Topology, scope: AclScope) -> list[AclBinding]:
    if not topology.dlt_tiers:
        return []
    parking = [topology.parking_topic] if topology.parking_topic else []
    watched = [t.topic for t in topology.dlt_tiers] + parking + list(topology.dead_letter_queue_topics)
    out = [AclBinding("dlt_watch", "topic", t, "literal", "READ", "count dead letters") for t in watched]
    group = scope.watch_group or watch_group(topology.group_id)
    out.append(AclBinding("dlt_watch", "group", group, "literal", "READ", "commit what was counted"))
    return out


def _view(topology: Topology, scope: AclScope) -> list[AclBinding]:
    out = [
        AclBinding("view", "topic", t, "literal", "READ", "backlog and dead letters")
        for t in _path_topics(topology)
    ]
    for tier in drained_tiers(topology, scope):
        group = topology.consumer_group(tier)
        out.append(AclBinding("view", "group", group, "literal", "DESCRIBE", "the tier's committed"))
    if topology.order_state_topic is not None:
        state = topology.order_state_topic
        out.append(AclBinding("view", "topic", state, "literal", "READ", "the blocked keys"))
    # the dead-letter counts: an assigned consumer in a fresh group it never joins nor commits
    out.append(AclBinding("view", "group", READER_GROUP_PREFIX, "prefixed", "DESCRIBE", "count dead letters"))
    return out + _dlt_page(topology, scope)


def _dlt_page(topology: Topology, scope: AclScope) -> list[AclBinding]:
    """A DLT page's reads: its dry run and its redrives' status, in the replay logs; never a write."""
    out = []
    for source in _replay_sources(topology):
        log = replay_log_name(source)
        out.append(AclBinding("view", "topic", log, "literal", "READ", "dry run, redrives' status"))
    if not out:  # nothing to replay from: no page to dry-run
        return out
    # the dry run checks the hold topic's partitions and that each target exists
    path = set(_path_topics(topology))
    extra = [topology.hold_topic] if topology.hold_topic is not None else []
    for topic in [*extra, *(t for t in scope.replay_targets if t not in path)]:
        out.append(AclBinding("view", "topic", topic, "literal", "DESCRIBE", "a dry run checks it"))
    return out


def _replay(topology: Topology, scope: AclScope) -> list[AclBinding]:
    out = []
    for source in _replay_sources(topology):
        out.append(AclBinding("replay", "topic", source, "literal", "READ", "read what to replay"))
        log = replay_log_name(source)
        for operation in ("READ", "WRITE", "CREATE"):
            out.append(AclBinding("replay", "topic", log, "literal", operation, "the replay log"))
        txn = replay_transactional_id(scope.transactional_id_prefix, source)
        out.append(AclBinding("replay", "transactional_id", txn, "literal", "WRITE", "the replay's chunks"))
    targets = [t.topic for t in topology.tiers if topology.input is None or t.index > 0]
    for topic in [*targets, *(t for t in scope.replay_targets if t not in targets)]:
        out.append(AclBinding("replay", "topic", topic, "literal", "WRITE", "a replay target"))
    if topology.redrive and topology.parking_topic:  # a round parks what was redriven max_redrives times
        why = "a redrive policy parks"
        out.append(AclBinding("replay", "topic", topology.parking_topic, "literal", "WRITE", why))
    out.append(AclBinding("replay", "group", READER_GROUP_PREFIX, "prefixed", "READ", "throw-away readers"))
    return out


_OPERATION_FLAGS = {
    "READ": "Read",
    "WRITE": "Write",
    "CREATE": "Create",
    "DESCRIBE": "Describe",
    "DESCRIBE_CONFIGS": "DescribeConfigs",
}
_RESOURCE_FLAGS = {"topic": "--topic", "group": "--group", "transactional_id": "--transactional-id"}


def principals_for(overrides: Sequence[str]) -> dict[str, str]:
    """``ROLE=User:NAME`` pairs -> {role: principal}; the rest default to ``User:<role>``."""
    chosen: dict[str, str] = {role: f"User:{role}" for role in ROLES}
    for pair in overrides:
        role, sep, principal = pair.partition("=")
        if not sep or role not in ROLES or ":" not in principal or not principal.split(":", 1)[1]:
            raise ValueError(
                f"--principal {pair!r} must be ROLE=TYPE:NAME (User:alice) with ROLE one of "
                f"{', '.join(ROLES)}"
            )
        chosen[role] = principal
    return chosen


def as_commands(bindings: Sequence[AclBinding], principals: dict[str, str], bootstrap: str) -> list[str]:
    """One ``kafka-acls.sh --add`` line per binding (``--command-config`` names the admin's file)."""
    lines = []
    for b in bindings:
        lines.append(
            f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties --add "
            f"--allow-principal {principals[b.role]} --operation {_OPERATION_FLAGS[b.operation]} "
            f"{_RESOURCE_FLAGS[b.resource_type]} {b.name} --resource-pattern-type {b.pattern}"
        )
    return lines


def as_table(bindings: Sequence[AclBinding], principals: dict[str, str]) -> list[str]:
    """A Markdown table: one row per (role, resource), its operations together (docs/security.md's table)."""
    rows: dict[tuple[str, str, str, str], list[str]] = {}
    for b in bindings:
        rows.setdefault((b.role, b.resource_type, b.name, b.pattern), []).append(b.operation)
    lines = ["| role (principal) | resource | name | pattern | operations |", "|---|---|---|---|---|"]
    for (role, kind, name, pattern), operations in rows.items():
        lines.append(
            f"| {role} (`{principals[role]}`) | {kind} | `{name}` | {pattern} | {', '.join(operations)} |"
        )
    return lines
