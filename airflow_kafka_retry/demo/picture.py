"""
The demo's picture: the flow main topic -> tiers -> processed / DLT / parking, and each tier's lateness.

Band widths are proportional to order counts. The data it is drawn from is written next to the
PNG as JSON (``flow.json``), so a test can compare it with the final table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.demo.account import PROCESSED, UNACCOUNTED, Account, dead_ends

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

_COLORS = {
    "main": "#4C72B0",
    "retry": "#DD8452",
    "dlt": "#C44E52",
    "parking": "#8172B3",
    PROCESSED: "#55A868",
    UNACCOUNTED: "#000000",
}
_GAP = 0.035
_NODE_W = 0.018


def columns(topology: Topology) -> dict[str, tuple[int, str]]:
    """Node -> (column, kind): the main topic, the tiers in order, the main DLT, then where orders end."""
    nodes = {topology.topic: (0, "main")}
    for i, tier in enumerate(topology.retry_tiers, start=1):
        nodes[tier.topic] = (i, "retry")
    last = len(topology.retry_tiers) + 2
    dlt, parking = dead_ends(topology)
    nodes[dlt] = (last - 1, "dlt")
    nodes[PROCESSED] = (last, PROCESSED)
    for tier in topology.dlt_tiers[1:]:
        nodes[tier.topic] = (last, "dlt")
    nodes[parking] = (last, "parking")
    nodes[UNACCOUNTED] = (last, UNACCOUNTED)
    return nodes


def flow_data(account: Account, topology: Topology) -> dict[str, Any]:
    """What the picture shows: node totals, edges, final places and lateness."""
    data = account.to_dict()
    layout = columns(topology)
    through: dict[str, int] = defaultdict(int)
    inflow: dict[str, int] = defaultdict(int)
    for a, b, n in account.edges():
        through[a] += n
        inflow[b] += n
    nodes = {
        name: {
            "column": col,
            "kind": kind,
            "orders": max(through[name], inflow[name]) if name != topology.topic else account.produced,
        }
        for name, (col, kind) in layout.items()
        if name == topology.topic or through[name] or inflow[name]
    }
    return {
        "produced": data["produced"],
        "final": data["final"],
        "nodes": nodes,
        "edges": data["edges"],
        "lateness": data["lateness"],
    }


def draw(data: dict[str, Any], png: Path, *, title: str) -> Path:
    """Draw ``data`` (from :func:`flow_data`) to ``png`` and write it to ``png`` with suffix ``.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import PathPatch, Rectangle
    from matplotlib.path import Path as MPath

    fig, (ax, lax) = plt.subplots(2, 1, figsize=(13, 8.5), gridspec_kw={"height_ratios": [3, 1]})
    nodes, edges = data["nodes"], [tuple(e) for e in data["edges"]]
    ncols = max(n["column"] for n in nodes.values()) + 1
    by_col: dict[int, list[str]] = defaultdict(list)
    for name, node in nodes.items():
        by_col[node["column"]].append(name)
    tallest = max(sum(nodes[n]["orders"] for n in names) for names in by_col.values())
    most = max(len(names) for names in by_col.values())
    scale = (1 - _GAP * (most - 1)) / max(tallest, 1)
    pos: dict[str, tuple[float, float, float]] = {}  # name -> (x, top, height)
    for col, names in by_col.items():
        x = col / (ncols - 1) * (1 - _NODE_W) if ncols > 1 else 0.0
        top = 1.0
        for name in sorted(names, key=lambda n: (nodes[n]["kind"] != PROCESSED, n)):
            height = nodes[name]["orders"] * scale
            if (
                nodes[name]["kind"] == "dlt" and 0 < col < ncols - 1
            ):  # the DLT sits low, out of the retries' way
                top = 1 - tallest * scale + height
            pos[name] = (x, top, height)
            top -= height + _GAP
    # band slots: a node's outgoing bands stacked from its top in the order of their targets (top first),
    # its incoming bands in the order of their sources (leftmost first)
    out_y: dict[tuple[str, str], float] = {}
    in_y: dict[tuple[str, str], float] = {}
    for name, (_, top, _) in pos.items():
        y = top
        for a, b, n in sorted(
            (e for e in edges if e[0] == name), key=lambda e: (-pos[e[1]][1], pos[e[1]][0])
        ):
            out_y[a, b], y = y, y - n * scale
        y = top
        for a, b, n in sorted(
            (e for e in edges if e[1] == name), key=lambda e: (pos[e[0]][0], -pos[e[0]][1])
        ):
            in_y[a, b], y = y, y - n * scale
    for a, b, n in edges:
        w = n * scale
        y0, y1 = out_y[a, b], in_y[a, b]
        x0, x1 = pos[a][0] + _NODE_W, pos[b][0]
        mid = (x0 + x1) / 2
        verts = [
            (x0, y0),
            (mid, y0),
            (mid, y1),
            (x1, y1),
            (x1, y1 - w),
            (mid, y1 - w),
            (mid, y0 - w),
            (x0, y0 - w),
            (x0, y0),
        ]
        codes = [
            MPath.MOVETO,
            MPath.CURVE4,
            MPath.CURVE4,
            MPath.CURVE4,
            MPath.LINETO,
            MPath.CURVE4,
            MPath.CURVE4,
            MPath.CURVE4,
            MPath.CLOSEPOLY,
        ]
        color = _COLORS[nodes[b]["kind"]]
        ax.add_patch(PathPatch(MPath(verts, codes), facecolor=color, edgecolor="none", alpha=0.35))
        replayed = nodes[a]["kind"] == "dlt"
        ax.text(
            mid,
            (y0 + y1 - w) / 2,
            f"{n} replayed" if replayed else str(n),
            ha="center",
            va="center",
            fontsize=8,
            color="#333333",
        )
    for name, (x, top, height) in pos.items():
        kind = nodes[name]["kind"]
        ax.add_patch(Rectangle((x, top - height), _NODE_W, height, facecolor=_COLORS[kind], edgecolor="none"))
        right = nodes[name]["column"] == ncols - 1 or kind == "dlt"  # label on the left of the node
        label = f"{name}\n{nodes[name]['orders']} orders"
        ax.text(
            x - 0.008 if right else x + _NODE_W + 0.008,
            top - height / 2,
            label,
            ha="right" if right else "left",
            va="center",
            fontsize=9,
            fontweight="bold",
        )
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(min(t - h for _, t, h in pos.values()) - 0.03, 1.03)
    ax.axis("off")
    ax.set_title(title, loc="left", fontsize=12)
    _lateness(lax, data["lateness"])
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    png.with_suffix(".json").write_text(json.dumps(data, indent=2, sort_keys=True))
    return png


def _lateness(ax: Any, lateness: dict[str, dict[str, Any]]) -> None:
    tiers: Sequence[str] = list(lateness)
    p50 = [lateness[t]["p50_s"] or 0 for t in tiers]
    worst = [lateness[t]["max_s"] or 0 for t in tiers]
    y = range(len(tiers))
    ax.barh([i + 0.2 for i in y], worst, height=0.38, color="#DD8452", alpha=0.5, label="max")
    ax.barh([i - 0.2 for i in y], p50, height=0.38, color="#DD8452", label="p50")
    ax.set_yticks(
        list(y),
        [f"{t} (delay {lateness[t]['delay_s']:.0f}s, {lateness[t]['handled']} handled)" for t in tiers],
    )
    ax.invert_yaxis()
    ax.set_xlabel("lateness per retry tier: handled time - due time (s), p50 and max")
    ax.set_xlim(0, max([*worst, 1]) * 1.15)
    ax.legend(loc="upper right", fontsize=8)
    for i, (a, b) in enumerate(zip(p50, worst, strict=True)):
        ax.text(b, i + 0.2, f" {b:.1f}s", va="center", fontsize=8)
        ax.text(a, i - 0.2, f" {a:.1f}s", va="center", fontsize=8)
