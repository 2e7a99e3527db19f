"""The IR listing: each value coloured by its locality, each op's user line beside it, regions
folded (a `<details>` per op with regions), each collective linked to its table row."""
from __future__ import annotations

import html
import re

from ...trace.inspection.report import ReportData

_TOKEN = re.compile(r"%([A-Za-z0-9_.]+)|\b(per_replica|mirrored)\b|@([A-Za-z0-9_.]+)")


def _line_html(text: str, data: ReportData, syncs: dict[str, str]) -> str:
    out, last = [], 0
    for m in _TOKEN.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        value, locality, symbol = m.groups()
        if value:
            out.append(f'<span class="v {data.localities.get(value, "")}" data-v="{html.escape(value)}">'
                       f'%{html.escape(value)}</span>')
        elif locality:
            out.append(f'<span class="loc-{locality}">{locality}</span>')
        else:
            kind = "sync_on_read" if syncs.get(symbol) == "on_read" else "mirrored"
            out.append(f'<span class="v {kind}" data-v="@{html.escape(symbol)}">@{html.escape(symbol)}</span>')
        last = m.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


def ir_listing(data: ReportData) -> str:
    """The final IR as HTML rows; an op with regions is a folded `<details>` whose summary is
    its first line."""
    syncs = {name: sync for name, _, sync, _ in data.variables}
    out: list[str] = []
    shown_loc = None
    for line in data.lines:
        op = data.ops[line.op] if line.op is not None else None
        body = _line_html(line.text, data, syncs)
        classes, src = "row", ""
        if op is not None:
            if op.collective is not None:
                classes += " coll"
                body += (f'  <a class="coll-link" href="#coll-{op.collective}" title="this collective in the '
                         f'table">\u21e2 collective #{op.collective}</a>')
            if op.loc is not None and (op.loc != shown_loc or op.collective is not None):  # once per line
                src = f"<b>{html.escape(op.loc)}</b>  {html.escape(op.source)}"
            shown_loc = op.loc if op.loc is not None else shown_loc
        if line.opens:
            body = '<span class="fold"></span>' + body
        ident = f' id="op-{line.op}"' if line.op is not None and not line.opens else ""
        row = f'<div class="{classes}"{ident}><span class="t">{body}</span><span class="src">{src}</span></div>'
        if line.opens:
            assert op is not None, "a line that opens a region is an op's"
            out.append(f'<details class="region" id="op-{line.op}" data-op="{html.escape(op.name)}">'
                       f"<summary>{row}</summary>")
        elif line.closes:
            out.append(row + "</details>")
        else:
            out.append(row)
    return "\n".join(out)
