"""The report page: one self-contained HTML file (inline style, script and SVG; nothing fetched)."""
from __future__ import annotations

import difflib
import html

from ...trace.inspection.report import ReportData
from .assets import CSS, SCRIPT
from .graph_svg import graph_svg
from .ir_html import ir_listing


def _n(x: int) -> str:
    return f"{x:,}"


def _collectives(data: ReportData) -> str:
    if not data.collectives:
        return '<p class="note">No collectives: the replicas never communicate in this program.</p>'
    rows = ['<table id="collectives"><tr><th>#</th><th>op</th><th>kind</th><th>type</th>'
            '<th class="num">tensor bytes</th><th class="num">bytes moved</th><th class="num">repeats</th>'
            "<th>reason</th><th>user's line</th><th>inserted by</th></tr>"]
    for k, row in enumerate(data.collectives):
        c = row.info
        ty = f"{c.dtype}{list(c.shape)}".replace(" ", "")
        repeats = str(c.repeats) + (f" (per iteration of {c.per_iteration_of})" if c.per_iteration_of else "")
        source = data.ops[row.op].source
        rows.append(
            f'<tr class="collective" id="coll-{k}" data-op="{html.escape(c.op)}" data-bytes="{c.payload_bytes}" '
            f'data-moved="{c.bytes_moved}"><td>{k}</td><td><a href="#op-{row.op}">{html.escape(c.op)}</a></td>'
            f"<td>{html.escape(c.kind)}</td><td><code>{html.escape(ty)}</code></td>"
            f'<td class="num tensor-bytes">{_n(c.payload_bytes)}</td>'
            f'<td class="num bytes-moved">{_n(c.bytes_moved)}</td>'
            f'<td class="num">{html.escape(repeats)}</td><td>{html.escape(c.reason)}</td>'
            f"<td><code>{html.escape(c.location)}</code> {html.escape(source)}</td>"
            f"<td>{html.escape(row.inserted_by)}</td></tr>")
        for j, (reason, loc, nbytes) in enumerate(c.members):
            by = row.members_inserted_by[j] if j < len(row.members_inserted_by) else "?"
            rows.append(f'<tr class="member"><td></td><td>[{j}]</td><td></td><td></td><td class="num">{_n(nbytes)}</td>'
                        f"<td></td><td></td><td>{html.escape(reason)}</td><td><code>{html.escape(loc)}</code></td>"
                        f"<td>{html.escape(by)}</td></tr>")
    rows.append("</table>")
    s = data.stats
    rows.append(f'<p class="note">{s.count} collective(s), {_n(s.bytes_per_replica)} bytes moved per replica per '
                f"step ({s.num_replicas} replicas). Tensor bytes: the size of the tensor reduced, gathered or "
                f"broadcast; bytes moved: what each replica sends for it per step with a ring algorithm "
                f"(all-reduce 2(N-1)/N, all-gather and broadcast (N-1)/N of the tensor), times its repeats.</p>")
    return "\n".join(rows)


def _memory(data: ReportData) -> str:
    m = data.memory
    if m is None:
        return '<p class="note">Not compiled: no memory analysis.</p>'
    rows = ['<table id="memory"><tr><th>per device (one replica)</th><th class="num">bytes</th><th></th></tr>']
    for what, nbytes, note in m.rows():
        rows.append(f'<tr data-what="{html.escape(what)}"><td>{html.escape(what)}</td>'
                    f'<td class="num">{_n(nbytes)}</td><td class="note">{html.escape(note)}</td></tr>')
    rows.append("</table>")
    rows.append(f'<p class="note">From XLA\'s analysis of the compiled program: inputs {_n(m.inputs)} bytes '
                f"(variables + optimizer slots + arguments), of which {_n(m.donated)} donated and updated in "
                f"place; peak is XLA's own estimate.</p>")
    return "\n".join(rows)


def _timings(data: ReportData) -> str:
    total = sum(s for _, s in data.phases) or 1.0
    rows = ['<table id="timings"><tr><th>phase</th><th class="num">ms</th><th></th></tr>']
    for what, seconds in data.phases:
        rows.append(f'<tr><td>{html.escape(what)}</td><td class="num">{seconds * 1e3:.1f}</td>'
                    f'<td><span class="bar" style="width:{max(1, 300 * seconds / total):.0f}px"></span></td></tr>')
    rows.append(f'<tr><td><b>total</b></td><td class="num"><b>{total * 1e3:.1f}</b></td><td></td></tr></table>')
    return "\n".join(rows)


def _diff(before: str, after: str) -> tuple[str, int, int]:
    lines, added, removed = [], 0, 0
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=2, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "ctx")
        added += cls == "add"
        removed += cls == "del"
        lines.append(f'<span class="{cls}">{html.escape(line)}</span>')
    return "".join(lines), added, removed  # each line a block of its own


def _pipeline(data: ReportData) -> str:
    seconds = {what.removeprefix("pass "): s for what, s in data.phases}
    out = []
    previous = None
    for stage, text in data.stages:
        if previous is None:
            out.append(f'<details class="stage" data-stage="{html.escape(stage)}">'
                       f'<summary><b>{html.escape(stage)}</b>: '
                       f"the IR as imported, before any pass ({text.count(chr(10))} lines)</summary>"
                       f'<pre class="diff">{html.escape(text)}</pre></details>')
        else:
            diff, added, removed = _diff(previous, text)
            ms = f", {seconds[stage] * 1e3:.1f} ms" if stage in seconds else ""
            change = f"+{added} \u2212{removed} lines" if diff else "no change"
            body = f'<pre class="diff">{diff}</pre>' if diff else ""
            out.append(f'<details class="stage" data-stage="{html.escape(stage)}">'
                       f'<summary><b>{html.escape(stage)}</b>{ms}: {change}</summary>{body}'
                       f"<details><summary>the whole IR after {html.escape(stage)}</summary>"
                       f'<pre class="diff">{html.escape(text)}</pre></details></details>')
        previous = text
    return "\n".join(out)


def render_report(data: ReportData) -> str:
    """The HTML page of one compiled function's report."""
    peak = f"{_n(data.memory.peak)} bytes peak per device" if data.memory is not None else ""
    facts = [f"{len(data.ops)} ops", data.devices, f"{data.stats.count} collective(s)",
             f"{_n(data.stats.bytes_per_replica)} bytes moved per replica per step", peak]
    legend = ('<p class="legend">Values: <span class="v mirrored">%mirrored</span> (identical on every replica) '
              '<span class="v per_replica">%per_replica</span> (may differ) '
              '<span class="v sync_on_read">%sync_on_read</span> (read from a sync-on-read variable). '
              "Click \u25b6 to unfold a region; hover a value to see its uses; the grey column is the line of "
              'your code each op came from. <button data-fold="open">unfold all</button>'
              '<button data-fold="close">fold all</button></p>')
    title = html.escape(f"strategax report: {data.name}")
    spans = "".join(f"<span>{html.escape(f)}</span>" for f in facts if f)
    sections = (("ir", "IR"), ("collectives", "collectives"), ("memory", "memory"), ("timings", "timings"),
                ("pipeline", "pipeline"), ("graph", "graph"))
    nav = "".join(f'<a href="#sec-{anchor}">{label}</a>' for anchor, label in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{CSS}</style>
<script>{SCRIPT}</script></head>
<body>
<header><h1>{html.escape(data.name)}</h1><div class="facts">{spans}</div></header>
<nav>{nav}</nav>
<section id="sec-ir"><h2>The IR after all passes</h2>{legend}
<div class="ir" id="ir">
{ir_listing(data)}
</div></section>
<section id="sec-collectives"><h2>Collectives per step</h2>
{_collectives(data)}</section>
<section id="sec-memory"><h2>Memory before running</h2>
{_memory(data)}</section>
<section id="sec-timings"><h2>Compile time per phase</h2>
{_timings(data)}</section>
<section id="sec-pipeline"><h2>The pipeline: the IR after each pass, as a diff against the one before</h2>
{_pipeline(data)}</section>
<section id="sec-graph"><h2>The dataflow graph</h2>
<p class="note">Top to bottom in dependency order; orange: collectives; the border's colour is the value's locality;
click a node for its op.</p>
<div class="graph">{graph_svg(data)}</div></section>
</body></html>
"""
