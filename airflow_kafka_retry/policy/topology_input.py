"""
A topology's input lane when it is another framework's dead-letter queue, and what its tiers do when due.

By default a topology's tier 0 is its main topic, which the service consumes. With ``input`` the tier 0 of
the topology is a dead-letter queue another framework writes (a Kafka share group's ``dlq.<group>``, say):
the provider drains it (the topology DAG's ``main`` task, ``include_main=True``) and its records travel
the retry tiers with the topology's back-off. ``topic`` still names the tiers, the DLTs and the parking
topic, and sizes them. ``on_due`` says what a tier does with a record when it is due:

* ``handle`` (default): the run's handler processes it, as in every topology;
* ``redeliver``: it goes back to its source topic for the share consumer to take again, with its attempt
  number in ``retry_topic-attempts`` (``policy/share_redelivery.py``); only a ``share-group`` input
  says where each record came from, so only it can be redelivered.

Pure: parsing and validation only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from airflow_kafka_retry.policy.errors import TopologyError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.dead_letter_families import Family
    from airflow_kafka_retry.policy.topology import Topology

OnDue = Literal["handle", "redeliver"]
ON_DUE: tuple[OnDue, ...] = ("handle", "redeliver")
#: The dead-letter families a topology can take as its input (``unknown`` names none).
INPUT_FAMILIES: tuple[Family, ...] = (
    "share-group",
    "kafka-connect",
    "spring-retry-topic",
    "spring-dead-letter",
    "airflow",
)
_INPUT_KEYS = ("family", "dlq")
#: The broker's default ``errors.deadletterqueue.topic.name.prefix``: a share group's DLQ is ``dlq.<group>``.
SHARE_DLQ_PREFIX = "dlq."


@dataclass(frozen=True)
class TopologyInput:
    """
    The dead-letter queue a topology drains as its tier 0.

    :param family: which framework writes it (:data:`INPUT_FAMILIES`).
    :param dlq: the DLQ topic.
    """

    family: Family
    dlq: str

    def to_dict(self) -> dict[str, str]:
        return {"family": self.family, "dlq": self.dlq}


def parse_input(data: object, source: str) -> TopologyInput:
    """``input: {family: share-group, dlq: dlq.orders-share}``; a TopologyError names each bad field."""
    if not isinstance(data, Mapping):
        raise TopologyError(
            f"must be a mapping like {{family: share-group, dlq: dlq.<group>}}, got {data!r}",
            field="input",
            source=source,
        )
    errors = [
        TopologyError(
            f"unknown key; known keys: {', '.join(_INPUT_KEYS)}", field=f"input.{key}", source=source
        )
        for key in data
        if key not in _INPUT_KEYS
    ]
    family, dlq = data.get("family"), data.get("dlq")
    if family not in INPUT_FAMILIES:
        errors.append(
            TopologyError(
                f"must be one of {', '.join(INPUT_FAMILIES)}, got {family!r}",
                field="input.family",
                source=source,
            )
        )
    if not isinstance(dlq, str) or not dlq:
        errors.append(
            TopologyError(
                f"must name the dead-letter topic the topology drains (a share group's is dlq.<group>), "
                f"got {dlq!r}",
                field="input.dlq",
                source=source,
            )
        )
    if errors:
        raise TopologyError.combine(errors)
    return TopologyInput(family, dlq)  # type: ignore[arg-type]  # checked against INPUT_FAMILIES above


def check_input(t: Topology) -> list[TopologyError]:
    """``input`` and ``on_due`` fit together, and the provider's group is not the share group's."""
    errors: list[TopologyError] = []
    if t.on_due not in ON_DUE:
        errors.append(t._error(f"must be one of {', '.join(ON_DUE)}, got {t.on_due!r}", "on_due"))
    source = t.input
    if source is not None and not isinstance(source, TopologyInput):
        return [*errors, t._error(f"must be a TopologyInput, got {source!r}", "input")]
    if t.on_due == "redeliver":
        if source is None:
            errors.append(
                t._error(
                    "on_due: redeliver needs an input: {family: share-group, dlq: dlq.<group>} (the records "
                    "go back to the source topic their share-group dead letter names)",
                    "on_due",
                )
            )
        elif source.family != "share-group":
            errors.append(
                t._error(
                    f"on_due: redeliver needs input.family: share-group, got {source.family!r}: only a "
                    "share group's dead letters name the source topic and partition to redeliver to and have "
                    "a share consumer that takes them again; use on_due: handle for this family",
                    "on_due",
                )
            )
    if (
        source is not None
        and source.family == "share-group"
        and source.dlq.startswith(SHARE_DLQ_PREFIX)
        and t.group_id == source.dlq[len(SHARE_DLQ_PREFIX) :]
    ):
        errors.append(
            t._error(
                f"{t.group_id!r} is the share group whose DLQ is {source.dlq!r}; group_id is the provider's "
                "consumer group of input.dlq (and names its tiers' groups), and Kafka has one namespace for "
                "consumer and share groups: pick another id",
                "group_id",
            )
        )
    return errors
