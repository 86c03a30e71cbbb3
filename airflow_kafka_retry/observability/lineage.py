"""
OpenLineage facets of tier runs, DLT replays and the DLT watch: Kafka topics as datasets, with counts.

Datasets are named the way OpenLineage names Kafka topics: namespace ``kafka://<host:port>`` (the
first server of the connection's ``bootstrap.servers``), name = the topic. A tier run reads its tier
topic and writes the next tier, the DLTs and the parking topic; each output carries
``outputStatistics.rowCount`` (records sent there) and the input ``inputStatistics.rowCount``
(records drained). The run carries a ``kafkaRetry`` facet with the summary's totals.

Everything OpenLineage is imported inside the functions, which the operators call only from their
``get_openlineage_facets_on_*`` methods: the OpenLineage provider calls those when it is installed
and enabled; without it nothing here is imported and nothing is spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_kafka_retry.policy.topology.model import Tier, Topology


def lineage_server(kafka_config: Mapping[str, Any]) -> str | None:
    """``host:port`` of the first bootstrap server (without a ``PROTOCOL://`` prefix); None if none."""
    servers = str(kafka_config.get("bootstrap.servers") or kafka_config.get("metadata.broker.list") or "")
    first = servers.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    return first or None


def connection_server(kafka_conn_id: str) -> str:
    """:func:`lineage_server` of a Kafka connection; a ValueError names a connection without servers."""
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    server = lineage_server(KafkaRetryHook(kafka_config_id=kafka_conn_id).kafka_config())
    if not server:
        raise ValueError(f"connection {kafka_conn_id!r} names no bootstrap.servers: no dataset namespace")
    return server


def kafka_namespace(server: str) -> str:
    return f"kafka://{server}"


def _inputs(server: str, counts: Mapping[str, int | None]) -> list[Any]:
    from openlineage.client.generated.base import InputDataset
    from openlineage.client.generated.input_statistics_input_dataset import (
        InputStatisticsInputDatasetFacet as Statistics,
    )

    return [
        InputDataset(
            namespace=kafka_namespace(server),
            name=topic,
            inputFacets={} if n is None else {"inputStatistics": Statistics(rowCount=n)},
        )
        for topic, n in counts.items()
    ]


def _outputs(server: str, counts: Mapping[str, int | None]) -> list[Any]:
    from openlineage.client.generated.base import OutputDataset
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet as Statistics,
    )

    return [
        OutputDataset(
            namespace=kafka_namespace(server),
            name=topic,
            outputFacets={} if n is None else {"outputStatistics": Statistics(rowCount=n)},
        )
        for topic, n in counts.items()
    ]


def _lineage(inputs: list[Any], outputs: list[Any], facet: dict[str, Any] | None) -> OperatorLineage:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_kafka_retry.observability.run_facet import FACET_NAME, KafkaRetryRunFacet

    run_facets = {FACET_NAME: KafkaRetryRunFacet(**facet)} if facet is not None else {}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def tier_run_lineage(
    topology: Topology, tier: Tier, server: str, document: Mapping[str, Any] | None = None
) -> OperatorLineage:
    """
    A tier run: its tier topic in, every destination out.

    With counts once ``document`` (the run summary) is known.
    """
    destinations = topology.destinations_from(tier)
    if document is None:
        return _lineage(
            _inputs(server, {tier.topic: None}), _outputs(server, dict.fromkeys(destinations)), None
        )
    totals = document["totals"]
    routed = totals["routed"]
    facet = {
        "kind": "tier_run",
        "status": document["status"],
        "topic": tier.topic,
        "tier": tier.index,
        "stopped": document.get("stopped"),
        "totals": dict(totals),
    }
    return _lineage(
        _inputs(server, {tier.topic: totals["drained"]}),
        _outputs(server, {topic: routed.get(topic, 0) for topic in destinations}),
        facet,
    )


def replay_lineage(source: str, server: str, document: Mapping[str, Any] | None = None) -> OperatorLineage:
    """A DLT replay: the DLT (or parking topic) in, each target topic out with the records moved there."""
    if document is None:
        return _lineage(_inputs(server, {source: None}), [], None)
    dry_run = bool(document.get("dry_run"))
    targets = {} if dry_run else dict(document.get("targets") or {})
    counts = (
        "dry_run",
        "scanned",
        "matched",
        "already_replayed",
        "moved_before",
        "left_out",
        "beyond_limit",
        "selected",
        "moved",
        "transactions",
    )
    totals = {k: document.get(k) for k in counts}
    totals["targets"] = dict(document.get("targets") or {})
    facet = {"kind": "dlt_replay", "status": document.get("status", "ok"), "topic": source, "totals": totals}
    return _lineage(_inputs(server, {source: document.get("scanned")}), _outputs(server, targets), facet)


def dlt_watch_lineage(
    topics: Iterable[str], server: str, document: Mapping[str, Any] | None = None
) -> OperatorLineage:
    """The DLT watch: every DLT in, with the new records it found in each."""
    topics = list(topics)
    if document is None:
        return _lineage(_inputs(server, dict.fromkeys(topics)), [], None)
    totals = document["totals"]
    found = totals.get("dlt_topics", {})
    facet = {"kind": "dlt_watch", "status": "ok", "totals": dict(totals)}
    return _lineage(_inputs(server, {t: found.get(t, 0) for t in topics}), [], facet)
