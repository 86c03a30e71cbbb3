"""
The demo's lineage graph: what the OpenLineage events of its tasks say moved from topic to topic.

The demo's Airflow writes its OpenLineage events with the provider's file transport, a file
each (``openlineage/``). Each completed tier run, replay and watch names its Kafka datasets and
their record counts; summed over every run, the tier runs' and replays' give the edges of the
orders path: topic -> topic (and topic -> processed, from the ``kafkaRetry`` facet's totals). The
graph is drawn as the picture a lineage backend (Marquez) shows, with the counts on its edges.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.demo.account import PROCESSED
from airflow_kafka_retry.demo.picture import columns

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

_COLORS = {
    "main": "#4C72B0",
    "retry": "#DD8452",
    "dlt": "#C44E52",
    "parking": "#8172B3",
    PROCESSED: "#55A868",
}


def read_events(folder: Path) -> list[dict[str, Any]]:
    """
    The events an OpenLineage file transport wrote into ``folder``.

    One JSON file each (``append: false``).
    """
    return [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def unfinished_runs(events: list[dict[str, Any]]) -> set[str]:
    """
    Runs of tasks with datasets that started and have no COMPLETE/FAIL/ABORT event yet.

    Tasks with datasets are this provider's operators.
    """
    started = {e["run"]["runId"] for e in events if e.get("eventType") == "START" and e.get("inputs")}
    ended = {e["run"]["runId"] for e in events if e.get("eventType") in ("COMPLETE", "FAIL", "ABORT")}
    return started - ended


def lineage_edges(events: list[dict[str, Any]]) -> dict[str, Any]:
    """
    The lineage graph's data, from completed task events.

    ``{"namespace", "edges": [[from, to, records], ...], "runs": {kind: n}}``.
    """
    edges: Counter[tuple[str, str]] = Counter()
    runs: Counter[str] = Counter()
    namespaces: set[str] = set()
    for event in events:
        facet = (event.get("run") or {}).get("facets", {}).get("kafkaRetry")
        if event.get("eventType") != "COMPLETE" or not facet or facet.get("kind") == "dlt_watch":
            continue
        runs[facet["kind"]] += 1
        inputs = event.get("inputs") or []
        if len(inputs) != 1:
            continue
        source = inputs[0]["name"]
        namespaces.add(inputs[0]["namespace"])
        for output in event.get("outputs") or []:
            count = (output.get("outputFacets") or {}).get("outputStatistics", {}).get("rowCount") or 0
            if count:
                edges[source, output["name"]] += count
        succeeded = facet.get("totals", {}).get("succeeded") or 0
        if facet["kind"] == "tier_run" and succeeded:
            edges[source, PROCESSED] += succeeded
    return {
        "namespace": ", ".join(sorted(namespaces)),
        "runs": dict(sorted(runs.items())),
        "edges": [[a, b, n] for (a, b), n in sorted(edges.items())],
    }


def draw_lineage(data: dict[str, Any], topology: Topology, png: Path, *, title: str) -> Path:
    """
    Draw ``data`` (from :func:`lineage_edges`) as a node-and-arrow graph.

    Its data goes next to it as JSON.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout = columns(topology)
    edges = [tuple(e) for e in data["edges"]]
    names = {n for a, b, _ in edges for n in (a, b)} | {topology.topic}
    last = max(layout.get(n, (0, ""))[0] for n in names)
    pos = {name: _place(name, layout, last, topology) for name in names}
    fig, ax = plt.subplots(figsize=(13, 5.5))
    ax.set_xlim(-0.12, 1.12)
    ax.set_ylim(-0.05, 1.05)
    for a, b, n in edges:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        backwards = x1 <= x0  # the replay: a DLT back to the main topic
        skips = abs(y1 - y0) < 0.05 and abs(x1 - x0) * max(last, 1) > 1.5  # along the line, past other nodes
        rad = -0.3 if backwards else (0.18 if skips else 0.0)  # bend arrows that would run over other nodes
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "color": "#555555",
                "lw": 1.2,
                "shrinkA": 34,
                "shrinkB": 34,
                "connectionstyle": f"arc3,rad={rad}",
            },
        )
        lx, ly = _curve_middle(ax, (x0, y0), (x1, y1), rad)
        ax.text(
            lx,
            ly,
            f"{n} replayed" if backwards else str(n),
            ha="center",
            va="center",
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"},
        )
    for name, (x, y) in pos.items():
        kind = layout.get(name, (0, PROCESSED))[1]
        box = {"boxstyle": "round,pad=0.5", "facecolor": _COLORS.get(kind, "#777777"), "edgecolor": "none"}
        ax.text(x, y, name, ha="center", va="center", fontsize=9, fontweight="bold", color="white", bbox=box)
    ax.axis("off")
    ax.set_title(title, loc="left", fontsize=11)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    png.with_suffix(".json").write_text(json.dumps(data, indent=2, sort_keys=True))
    return png


def _place(
    name: str, layout: dict[str, tuple[int, str]], last: int, topology: Topology
) -> tuple[float, float]:
    """
    Main topic and tiers on one line.

    Processed above the end, DLTs below, parking at the end of the line.
    """
    column, kind = layout.get(name, (last, PROCESSED))
    x = column / max(last, 1)
    if kind == PROCESSED:
        return x, 0.88
    if kind == "dlt":
        return x, 0.12 if name == topology.dlt_topic or column < last else 0.3
    return x, 0.55


def _curve_middle(
    ax: Any, start: tuple[float, float], end: tuple[float, float], rad: float
) -> tuple[float, float]:
    """The middle of matplotlib's ``arc3`` curve from ``start`` to ``end`` (in display space, as arc3 is)."""
    (x0, y0), (x1, y1) = ax.transData.transform([start, end])
    mx, my = (x0 + x1) / 2, (y0 + y1) / 2
    cx, cy = mx + rad * (y1 - y0), my - rad * (x1 - x0)  # arc3's control point
    return tuple(ax.transData.inverted().transform(((mx + cx) / 2, (my + cy) / 2)))
