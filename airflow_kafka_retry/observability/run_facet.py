"""The custom OpenLineage run facet of this provider (imported only where OpenLineage is installed)."""

from __future__ import annotations

from typing import Any

from attrs import define, field
from openlineage.client.facet_v2 import RunFacet

#: The facet's key in a run's facets.
FACET_NAME = "kafkaRetry"


@define
class KafkaRetryRunFacet(RunFacet):
    """
    What a tier run, a DLT replay or a DLT watch did, in counts: the ``totals`` of its summary.

    Never payloads, keys or configuration values: topic names, exception class names and counts.

    :param kind: ``tier_run``, ``dlt_replay`` or ``dlt_watch``.
    :param status: ``ok`` or ``failed``.
    :param topic: the topic read (the tier, the DLT or parking topic; a watch reads several: None).
    :param tier: the tier index of a tier run.
    :param totals: the run summary's totals.
    """

    kind: str
    status: str
    topic: str | None = None
    tier: int | None = None
    stopped: str | None = None
    totals: dict[str, Any] = field(factory=dict)

    _additional_skip_redact = ["kind", "status", "topic", "tier", "stopped", "totals"]

    @staticmethod
    def _get_schema() -> str:
        return "urn:airflow-kafka-retry:openlineage:KafkaRetryRunFacet:1-0-0"
