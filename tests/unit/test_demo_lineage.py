"""The demo's lineage graph data from OpenLineage events (pure: events in, edges out)."""

from __future__ import annotations

from airflow_kafka_retry.demo.lineage_graph import lineage_edges, unfinished_runs

NS = "kafka://k1:9092"


def _event(
    kind: str,
    run: str,
    source: str,
    outputs: dict[str, int],
    *,
    event_type: str = "COMPLETE",
    succeeded: int = 0,
) -> dict:
    return {
        "eventType": event_type,
        "run": {
            "runId": run,
            "facets": {}
            if event_type == "START"
            else {"kafkaRetry": {"kind": kind, "status": "ok", "totals": {"succeeded": succeeded}}},
        },
        "inputs": [{"namespace": NS, "name": source}],
        "outputs": [
            {"namespace": NS, "name": t, "outputFacets": {"outputStatistics": {"rowCount": n}}}
            for t, n in outputs.items()
        ],
    }


def test_edges_are_summed_over_runs_with_processed_from_the_facet_and_empty_outputs_left_out():
    events = [
        _event("tier_run", "a", "orders", {"orders-retry-1": 3, "orders-dlt": 0}, succeeded=7),
        _event("tier_run", "b", "orders", {"orders-retry-1": 2, "orders-dlt": 1}, succeeded=4),
        _event("dlt_replay", "c", "orders-dlt", {"orders": 1}),
        _event("dlt_watch", "d", "orders-dlt", {}),
        _event("tier_run", "e", "orders", {"orders-retry-1": 9}, event_type="START"),
    ]
    data = lineage_edges(events)
    assert data["edges"] == [
        ["orders", "orders-dlt", 1],
        ["orders", "orders-retry-1", 5],
        ["orders", "processed", 11],
        ["orders-dlt", "orders", 1],
    ]
    assert data["runs"] == {"dlt_replay": 1, "tier_run": 2}
    assert data["namespace"] == NS


def test_a_started_run_without_its_end_is_unfinished():
    started = _event("tier_run", "a", "orders", {}, event_type="START")
    assert unfinished_runs([started]) == {"a"}
    assert unfinished_runs([started, _event("tier_run", "a", "orders", {})]) == set()
    sensor = {"eventType": "START", "run": {"runId": "s", "facets": {}}, "inputs": []}
    assert unfinished_runs([sensor]) == set(), "a task without datasets is not waited for"
