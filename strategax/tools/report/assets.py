"""The page's own style sheet and script, inlined into every report (no network, no framework)."""

CSS = """
:root { --mirrored: #1565c0; --per_replica: #c62828; --sync_on_read: #6a1b9a; --coll: #ef6c00;
        --bg: #fafafa; --line: #e0e0e0; font-family: system-ui, sans-serif; }
body { margin: 0; background: var(--bg); color: #212121; }
header { padding: 12px 20px; background: #263238; color: #fff; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header .facts span { margin-right: 18px; }
nav { position: sticky; top: 0; background: #37474f; padding: 6px 20px; z-index: 2; }
nav a { color: #fff; margin-right: 16px; text-decoration: none; font-size: 14px; }
section { padding: 8px 20px 16px; }
h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
code, pre, .ir { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.legend span { margin-right: 14px; }
.ir { background: #fff; border: 1px solid var(--line); padding: 6px 0; overflow-x: auto; }
.row { display: grid; grid-template-columns: minmax(0, 1fr) 34%; white-space: pre; line-height: 17px; }
.row:hover { background: #f1f8e9; }
.row .t { overflow: hidden; text-overflow: ellipsis; }
.row:hover .t { white-space: pre-wrap; word-break: break-all; }
.row .src { color: #616161; overflow: hidden; text-overflow: ellipsis; padding-left: 10px;
            border-left: 1px solid var(--line); }
.row .src b { color: #9e9e9e; font-weight: normal; }
.row.coll { background: #fff3e0; }
.row.coll .t { font-weight: bold; }
.target > .row, .row.target, tr.target { outline: 2px solid var(--coll); background: #ffe0b2; }
details.region > summary { list-style: none; cursor: pointer; }
details.region > summary::-webkit-details-marker { display: none; }
details.region > summary .fold::before { content: "\\25B6  "; }
details.region[open] > summary .fold::before { content: "\\25BC  "; }
.fold { color: #00897b; }
.v.mirrored, .loc-mirrored { color: var(--mirrored); }
.v.per_replica, .loc-per_replica { color: var(--per_replica); }
.v.sync_on_read, .loc-sync_on_read { color: var(--sync_on_read); font-style: italic; }
.v.hl { background: #fff59d; }
a.coll-link { color: var(--coll); font-weight: bold; text-decoration: none; }
table { border-collapse: collapse; font-size: 13px; background: #fff; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.member td { color: #616161; font-size: 12px; }
.bar { display: inline-block; height: 10px; background: #80cbc4; vertical-align: middle; }
pre.diff { background: #fff; border: 1px solid var(--line); padding: 6px; max-height: 480px; overflow: auto; }
pre.diff .add { background: #e8f5e9; color: #1b5e20; display: block; }
pre.diff .del { background: #ffebee; color: #b71c1c; display: block; }
pre.diff .hunk { color: #6a1b9a; display: block; }
pre.diff .ctx { display: block; }
details.stage { margin: 4px 0; }
details.stage > summary { cursor: pointer; }
.graph { overflow: auto; max-height: 720px; border: 1px solid var(--line); background: #fff; }
.graph text { font-family: ui-monospace, monospace; font-size: 10px; }
.graph a:hover rect { stroke-width: 3; }
.note { color: #616161; font-size: 13px; }
button { font-size: 12px; margin-right: 6px; }
"""

SCRIPT = """
(function () {
  // Open every folded region around an element, then show it (a link into a folded loop).
  function reveal(id) {
    var el = document.getElementById(id);
    if (!el) return;
    for (var p = el; p; p = p.parentElement) { if (p.tagName === 'DETAILS') p.open = true; }
    document.querySelectorAll('.target').forEach(function (t) { t.classList.remove('target'); });
    el.classList.add('target');
    el.scrollIntoView({block: 'center'});
  }
  window.addEventListener('hashchange', function () { reveal(decodeURIComponent(location.hash.slice(1))); });
  document.addEventListener('click', function (e) {  // the same link twice: no hashchange
    var a = e.target.closest('a[href^="#"]');
    if (a) reveal(decodeURIComponent(a.getAttribute('href').slice(1)));
  });
  document.addEventListener('DOMContentLoaded', function () {
    if (location.hash) reveal(decodeURIComponent(location.hash.slice(1)));
    document.querySelectorAll('[data-fold]').forEach(function (b) {
      b.addEventListener('click', function () {
        var open = b.getAttribute('data-fold') === 'open';
        document.querySelectorAll('#ir details.region').forEach(function (d) { d.open = open; });
      });
    });
    // Hovering a value lights up its definition and every use.
    var ir = document.getElementById('ir');
    if (ir) {
      ir.addEventListener('mouseover', function (e) {
        var v = e.target.closest('.v');
        if (!v) return;
        ir.querySelectorAll('.v[data-v="' + v.dataset.v + '"]').forEach(function (x) { x.classList.add('hl'); });
      });
      ir.addEventListener('mouseout', function (e) {
        if (!e.target.closest('.v')) return;
        ir.querySelectorAll('.v.hl').forEach(function (x) { x.classList.remove('hl'); });
      });
    }
  });
})();
"""
