"""The lane of a partition run under ``ordering: key``: the keeper on the main topic, marking elsewhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.drain.lanes import LaneKind, user_handler
from airflow_kafka_retry.engine.drain.ordering.keeper import KeeperLane
from airflow_kafka_retry.engine.drain.ordering.marking import MarkingLane

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

KEEPING = LaneKind(handler=user_handler, open=KeeperLane)
MARKING = LaneKind(handler=user_handler, open=MarkingLane)


def ordering_lane(topology: Topology, tier: Tier) -> LaneKind | None:
    """The lane of ``tier`` under ``ordering: key`` (None: the topology does not order keys)."""
    if topology.ordering != "key":
        return None
    return KEEPING if tier.kind == "main" else MARKING
