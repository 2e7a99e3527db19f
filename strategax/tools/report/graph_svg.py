"""The dataflow graph as inline SVG: layers from networkx's topological generations, each
layer ordered by where its inputs sit (one barycentre sweep), collectives filled orange,
every op node linked to its line in the IR."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ...trace.inspection.report import ReportData

if TYPE_CHECKING:  # imported where a graph is laid out: networkx takes ~0.5 s of every `import strategax`
    import networkx as nx

MAX_NODES = 600
W, H, GAP_X, GAP_Y = 132, 22, 18, 46
FILL = {"collective": "#ffcc80", "arg": "#e3f2fd", "return": "#e0e0e0", "op": "#ffffff"}
STROKE = {"mirrored": "#1565c0", "per_replica": "#c62828", "sync_on_read": "#6a1b9a", "": "#757575"}


def _layers(g: nx.DiGraph) -> list[list]:
    import networkx as nx

    layers = [list(layer) for layer in nx.topological_generations(g)]
    x: dict = {}

    def centre(node) -> float:
        preds = [x[p] for p in g.predecessors(node) if p in x]
        return sum(preds) / len(preds) if preds else float("inf")

    for layer in layers:
        layer.sort(key=lambda n: (centre(n), str(n)))
        x.update((node, i) for i, node in enumerate(layer))
    return layers


def graph_svg(data: ReportData) -> str:
    g = data.graph
    if g.number_of_nodes() > MAX_NODES:
        return (f'<p class="note">The graph has {g.number_of_nodes()} nodes (over {MAX_NODES}): not drawn; '
                f"strategax-dump writes it as DOT.</p>")
    layers = _layers(g)
    width = max(len(layer) for layer in layers) * (W + GAP_X) + GAP_X
    pos = {}
    for row, layer in enumerate(layers):
        left = (width - len(layer) * (W + GAP_X) + GAP_X) / 2
        for col, node in enumerate(layer):
            pos[node] = (left + col * (W + GAP_X), GAP_Y / 2 + row * (H + GAP_Y))
    height = len(layers) * (H + GAP_Y)
    parts = [f'<svg width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}">',
             '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#9e9e9e"/></marker></defs>']
    for a, b in g.edges:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        x1, y1, x2 = x1 + W / 2, y1 + H, x2 + W / 2
        mid = (y1 + y2) / 2
        parts.append(f'<path d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}" '
                     f'fill="none" stroke="#bdbdbd" marker-end="url(#arrow)"/>')
    for node, attrs in g.nodes(data=True):
        x, y = pos[node]
        op = attrs.get("op")
        kind = attrs["kind"]
        locality = data.ops[op].locality if op is not None else ""
        title = html.escape(attrs["label"])
        name = attrs["label"].split("\n")[0]
        short = name if len(name) <= 20 else name[:19] + "\u2026"
        box = (f'<rect x="{x:.0f}" y="{y:.0f}" width="{W}" height="{H}" rx="4" fill="{FILL[kind]}" '
               f'stroke="{STROKE.get(locality, STROKE[""])}"/>'
               f'<text x="{x + W / 2:.0f}" y="{y + 15:.0f}" text-anchor="middle">{html.escape(short)}</text>'
               f"<title>{title}</title>")
        parts.append(f'<a href="#op-{op}">{box}</a>' if op is not None else f"<g>{box}</g>")
    parts.append("</svg>")
    return "\n".join(parts)
