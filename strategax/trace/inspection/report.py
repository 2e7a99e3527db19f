"""The report's data: everything `f.report()` and `strategax-dump --html` show about one
compiled function, as plain data (the IR's lines and ops, the localities of its values, the
collectives with the pass that inserted each, the IR after each pass, timings, memory, the
dataflow graph). `strategax/tools/report` renders it as HTML; trace/ may not import tools/
(it sits above), so the renderer is handed in once by `import strategax` (`use_renderer`)."""
from __future__ import annotations

import linecache
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ... import ir
from ...ir import Block, Module, is_collective, lookup
from ...ir.analysis import CollectiveInfo, CollectiveStats, collective_stats
from ..graph import module_graph
from .memory import MemoryStats, memory_stats

if TYPE_CHECKING:  # only a field's type here; importing networkx costs ~0.5 s of every `import strategax`
    import networkx as nx

TRACED = "traced"


@dataclass(frozen=True)
class IRLine:
    """One printed line of the final IR: `op` is the index of the op it starts (None for the
    module's and functions' own lines, yields and the closing line of an op's regions)."""
    text: str
    op: int | None = None
    opens: bool = False  # this op has regions: the lines up to its `closes` line fold away
    closes: bool = False


@dataclass(frozen=True)
class OpInfo:
    name: str
    loc: str | None  # "file:line"
    source: str  # the user's line of code there ("" when the file cannot be read)
    collective: int | None  # its row in `collectives`
    locality: str  # of its first result: "mirrored", "per_replica", "sync_on_read" or ""


@dataclass(frozen=True)
class CollectiveRow:
    info: CollectiveInfo
    op: int
    inserted_by: str  # the first stage whose IR holds it: "traced" (your own call) or a pass
    members_inserted_by: tuple[str, ...] = ()


@dataclass
class ReportData:
    name: str
    devices: str  # "8 x cpu"
    lines: list[IRLine]
    ops: list[OpInfo]
    localities: dict[str, str]  # printed value name (without %) -> locality
    variables: list[tuple[str, str, str, str]]  # (name, type, sync, aggregation)
    stats: CollectiveStats
    collectives: list[CollectiveRow]
    stages: list[tuple[str, str]]  # ("traced", text), then (pass name, text) after each pass
    phases: list[tuple[str, float]]  # (what, seconds): tracing, each pass, lowering, XLA's compile
    memory: MemoryStats | None
    graph: nx.DiGraph  # trace.graph.module_graph; node attribute `op` indexes `ops`
    notes: list[str] = field(default_factory=list)


_RENDERER: list[Callable[[ReportData], str]] = []


def use_renderer(render: Callable[[ReportData], str]) -> None:
    """Set the function that turns a ReportData into the page (`import strategax` sets
    strategax.tools.report's)."""
    _RENDERER[:] = [render]


def render(data: ReportData) -> str:
    if not _RENDERER:
        raise RuntimeError("no report renderer: `import strategax` installs strategax.tools.report's")
    return _RENDERER[0](data)


def _source(loc) -> str:
    if loc is None:
        return ""
    for path in (loc.file, os.path.abspath(loc.file)):
        text = linecache.getline(path, loc.line)
        if text:
            return text.strip()
    return ""


_NAME = re.compile(r"%([A-Za-z0-9_.]+)")


def _blocks(block: Block) -> Iterator[Block]:
    """A block and its regions' blocks, in the printer's order."""
    yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region)


def _names(lines: list[str], ops: list, op_lines: dict[int, int], module: Module) -> dict[str, str]:
    """Printed value name -> locality, read from each defining line in print order."""
    sync = {v.name: v.attrs.get("sync", "") for v in module.vars}

    def locality(value, op=None) -> str:
        var = op.attrs.get("var") if op is not None and op.name == "sx.var_read" else None
        if var is not None and sync.get(var.name) == "on_read":
            return "sync_on_read"
        return value.type.locality.value if value.type.locality is not None else ""

    out: dict[str, str] = {}
    blocks = [b for f in module.funcs for b in _blocks(f.body)]
    headers = [ln for ln in lines if ln.lstrip().startswith(("func @", "^("))]  # argument lists
    for block, header in zip(blocks, headers):
        for value, name in zip(block.args, re.findall(r"%([A-Za-z0-9_.]+):", header)):
            out[name] = locality(value)
    for op in ops:
        if op.results:
            head = lines[op_lines[id(op)]].split(" = ", 1)[0]
            for value, name in zip(op.results, _NAME.findall(head)):
                out[name] = locality(value, op)
    return out


_STRING = r'"((?:[^"\\]|\\.)*)"'
_OP_NAME = re.compile(r"^\s*(?:%[^=]*= )?(sx\.[A-Za-z_]+)")
_REASON = re.compile(r"\breason = " + _STRING)
_LOC = re.compile(r"loc\(" + _STRING + r":(\d+)\)\s*$")
_MEMBERS = {key: re.compile(r"\b" + key + r" = \[([^\]]*)\]") for key in ("reasons", "locs")}


def _unquote(s: str) -> str:
    return s.replace('\\"', '"').replace("\\\\", "\\")


def _collective_keys(text: str) -> Iterator[tuple]:
    """(op, reason, location) of each collective in IR text, and (reason, location) of each
    bucket member: read from the printed lines (parsing every stage's IR is slower)."""
    for line in text.splitlines():
        m = _OP_NAME.match(line)
        opdef = lookup(m.group(1)) if m else None
        if m is None or opdef is None or not opdef.is_collective:
            continue
        reason = _REASON.search(line)
        loc = _LOC.search(line)
        location = f"{_unquote(loc.group(1))}:{loc.group(2)}" if loc else "?"
        yield (m.group(1), _unquote(reason.group(1)) if reason else "", location)
        members = {k: [_unquote(x) for x in re.findall(_STRING, r.group(1))]
                   for k, r in ((k, rx.search(line)) for k, rx in _MEMBERS.items()) if r}
        if "reasons" not in members:
            yield (_unquote(reason.group(1)) if reason else "", location)
        else:
            yield from zip(members["reasons"], members.get("locs", ["?"] * len(members["reasons"])))


def _first_stage(stages: list[tuple[str, str]]) -> Callable[[tuple], str]:
    """(op, reason, location) of a collective, or (reason, location) of a bucket's member ->
    the first stage whose IR has it."""
    seen: dict[tuple, str] = {}
    for stage, text in stages:
        for key in _collective_keys(text):
            seen.setdefault(key, stage)
    return lambda key: seen.get(key, "?")


def report_data(module: Module, stages: dict[str, str], phases: dict[str, float], memory: MemoryStats | None,
                devices: str) -> ReportData:
    """The report of `module` (the final IR), given the IR after each stage, the time of each
    phase and the memory table."""
    op_lines: dict[int, int] = {}
    text = ir.print_module(module, op_lines)
    lines = text.rstrip("\n").split("\n")
    ops = list(module.walk())
    index = {id(op): i for i, op in enumerate(ops)}
    starts = {op_lines[id(op)]: i for i, op in enumerate(ops)}
    closing: set[int] = set()
    for op in ops:  # the `})` line that closes an op's regions: the first at its indentation
        if op.regions:
            start = op_lines[id(op)]
            indent = lines[start][:len(lines[start]) - len(lines[start].lstrip())]
            closing.add(next(k for k in range(start + 1, len(lines)) if lines[k].startswith(indent + "})")))
    ir_lines = [IRLine(t, starts.get(k), k in starts and bool(ops[starts[k]].regions), k in closing)
                for k, t in enumerate(lines)]

    stats = collective_stats(module)
    collective_ops = [op for op in ops if is_collective(op)]  # collective_stats' order
    stage_list = list(stages.items())
    first = _first_stage(stage_list)
    rows, row_of = [], {}
    for info, op in zip(stats.collectives, collective_ops):
        row_of[id(op)] = len(rows)
        members = tuple(first((reason, loc)) for reason, loc, _ in info.members)
        rows.append(CollectiveRow(info, index[id(op)], first((info.op, info.reason, info.location)), members))
    localities = _names(lines, ops, op_lines, module)
    infos = []
    for op in ops:
        first_result = _NAME.findall(lines[op_lines[id(op)]].split(" = ", 1)[0])[:1] if op.results else []
        infos.append(OpInfo(op.name, str(op.loc) if op.loc else None, _source(op.loc), row_of.get(id(op)),
                            localities.get(first_result[0], "") if first_result else ""))
    graph = module_graph(module)
    top = {f"op{k}": index[id(op)] for k, op in enumerate(module.main.body.ops)}
    for node, data in graph.nodes(data=True):
        data["op"] = top.get(node)
    variables = [(v.name, str(v.type), str(v.attrs.get("sync", "")), str(v.attrs.get("agg", ""))) for v in module.vars]
    return ReportData(module.name, devices, ir_lines, infos, localities, variables, stats, rows, stage_list,
                      list(phases.items()), memory, graph)


def build_report(function, args, kwargs) -> ReportData:
    """Trace `function` again for these arguments with snapshots and timings, lower and compile
    its program (timed), and gather the report's data."""
    compiled, global_args = function._lowering_args(args, kwargs)
    snapshots: dict[str, str] = {}
    timings: dict[str, float] = {}
    start = time.perf_counter()
    function._trace(function._signature(args, kwargs), snapshots, timings)
    total = time.perf_counter() - start
    phases = {"trace + import": total - sum(timings.values())}
    phases.update({f"pass {k}": v for k, v in timings.items()})
    start = time.perf_counter()
    lowered = compiled.executable.lower(*global_args)
    phases["lower to StableHLO"] = time.perf_counter() - start
    start = time.perf_counter()
    executable = lowered.compile()
    phases["XLA compile"] = time.perf_counter() - start
    return compiled_report(compiled, snapshots, phases, executable)


def compiled_report(compiled, stages: dict[str, str], phases: dict[str, float], executable) -> ReportData:
    """The report of a compiled specialization (`compiled._Compiled`) whose program XLA compiled
    as `executable` (its memory analysis fills the memory table)."""
    if compiled.memory is None:
        compiled.memory = memory_stats(executable.memory_analysis(), compiled.executable.in_layouts,
                                       compiled.variables)
    mesh = compiled.executable.mesh
    devices = f"{mesh.devices.size} x {mesh.devices.flat[0].platform}"
    return report_data(compiled.module, stages, phases, compiled.memory, devices)
