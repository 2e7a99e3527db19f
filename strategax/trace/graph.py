"""The dataflow graph of a module (networkx), and its DOT text for Graphviz."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import Module, is_collective

if TYPE_CHECKING:  # imported where a graph is built: networkx takes ~0.5 s of every `import strategax`
    import networkx as nx


def module_graph(module: Module) -> nx.DiGraph:
    """Nodes: the main function's arguments, ops and return; edges: the values between them."""
    import networkx as nx

    g = nx.DiGraph()
    body = module.main.body
    producer: dict[int, str] = {}
    for i, a in enumerate(body.args):
        node = f"arg{i}"
        g.add_node(node, label=f"arg {i}\n{a.type}", kind="arg")
        producer[id(a)] = node
    for k, op in enumerate(body.ops):
        node = f"op{k}"
        collective = is_collective(op)
        label = op.name + (f"\n{op.attrs.get('reason', '')}" if collective else "")
        if op.loc:
            label += f"\n{op.loc}"
        g.add_node(node, label=label, kind="collective" if collective else "op")
        for v in op.operands:
            if id(v) in producer:
                g.add_edge(producer[id(v)], node, label=str(v.type))
        for r in op.results:
            producer[id(r)] = node
    g.add_node("return", label="return", kind="return")
    for v in body.results:
        if id(v) in producer:
            g.add_edge(producer[id(v)], "return", label=str(v.type))
    return g


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_STYLE = {"collective": 'shape=box, style=filled, fillcolor="#ffcc80"', "arg": "shape=ellipse",
          "return": "shape=ellipse", "op": "shape=box"}


def to_dot(g: nx.DiGraph, name: str = "module") -> str:
    """DOT text of `module_graph`'s graph; collectives are filled orange."""
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;", '  node [fontname="monospace", fontsize=10];']
    for node, data in g.nodes(data=True):
        lines.append(f"  {node} [label={_quote(data['label'])}, {_STYLE[data['kind']]}];")
    for a, b, data in g.edges(data=True):
        lines.append(f"  {a} -> {b} [label={_quote(data['label'])}, fontsize=8];")
    lines.append("}")
    return "\n".join(lines) + "\n"
