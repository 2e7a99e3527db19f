"""`STRATEGAX_DUMP_TO=DIR`: write what the compiler did for every function it compiles.

Per compiled function, a folder `DIR/NNN_name/` with the traced IR, the IR after each pass,
the lowered StableHLO, the compiled HLO, with STRATEGAX_DUMP_PLATFORMS=tpu,cuda the program
exported for each of those platforms (`exported.PLATFORM.stablehlo.mlir` and the serialized
`jax.export.Exported` as `exported.PLATFORM.bin`), `summary.txt` (each collective with its bytes, reason
and user line; bytes moved per replica per step; compile time per phase), with
STRATEGAX_DUMP_HTML=1 `report.html` (the page of `f.report`), and the dataflow graph as DOT
(`graph.dot`, rendered to `graph.svg` when Graphviz's `dot` is on the PATH).
The dump is a side output: when it cannot be written (the path is a file, the folder is
read-only, the disk is full) one warning says so and the program runs on without it.
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
import warnings
from pathlib import Path

from .. import ir
from ..errors import user_location
from ..ir.analysis import collective_stats
from .graph import module_graph, to_dot
from .inspection import compiled_report, render_report

ENV = "STRATEGAX_DUMP_TO"
PLATFORMS_ENV = "STRATEGAX_DUMP_PLATFORMS"  # e.g. "tpu,cuda": also export the program for each
HTML_ENV = "STRATEGAX_DUMP_HTML"  # "1": also write report.html (f.report's page)
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # what jax.export lowers for
SVG_OP_LIMIT = 2000  # larger graphs are written as DOT only
_counter = itertools.count()
_UNWRITABLE: set[Path] = set()  # dump folders that failed once: warned about, not tried again


def dump_dir() -> Path | None:
    """The dump folder when STRATEGAX_DUMP_TO is set, else None."""
    where = os.environ.get(ENV)
    return Path(where) if where else None


def check_platforms(platforms) -> tuple[str, ...]:
    """`platforms` as a tuple of jax.export platform names; a ValueError names a wrong one."""
    if isinstance(platforms, str):
        platforms = tuple(p for p in platforms.split(",") if p)
    platforms = tuple(p.strip().lower() for p in platforms)
    bad = [p for p in platforms if p not in PLATFORMS]
    if bad or not platforms:
        raise ValueError(f"cannot export for platform(s) {bad or list(platforms)}: the platforms are "
                         f"{', '.join(PLATFORMS)} (\"gpu\" is \"cuda\" or \"rocm\")")
    return platforms


def dump_platforms() -> tuple[str, ...]:
    """The platforms named by STRATEGAX_DUMP_PLATFORMS (none when unset)."""
    where = os.environ.get(PLATFORMS_ENV, "")
    return check_platforms(where) if where.strip() else ()


def compile_dumped(function, sig, compile_fn):
    """Compile `sig` with `compile_fn(snapshots, timings)` and write the dump beside it; a dump
    that cannot be written warns once and never fails the compilation."""
    root = dump_dir()
    if root is None or root in _UNWRITABLE:
        return compile_fn(None, None)
    snapshots: dict[str, str] = {}
    timings: dict[str, float] = {}
    start = time.perf_counter()
    compiled = compile_fn(snapshots, timings)
    traced = time.perf_counter() - start
    folder = root / f"{next(_counter):03d}_{function._name}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_dump(folder, compiled, sig, snapshots, timings, traced)
    except OSError as e:
        _UNWRITABLE.add(root)
        file, line = user_location()
        warnings.warn_explicit(
            f"{ENV}={root}: the dump cannot be written ({e}); the program runs without it and "
            f"nothing more is dumped there. fix: point {ENV} at a writable folder with free space",
            RuntimeWarning, file, line)
    return compiled


def write_dump(folder: Path, compiled, sig, snapshots: dict[str, str], timings: dict[str, float],
               total: float) -> None:
    """Write the stages, the lowered and compiled programs, summary.txt and graph.dot."""
    for i, (stage, text) in enumerate(snapshots.items()):
        (folder / f"{i:02d}_{re.sub(r'[^A-Za-z0-9_.#-]', '_', stage)}.sxir").write_text(text)
    (folder / "final.sxir").write_text(ir.print_module(compiled.module))
    phases = {"trace + import": total - sum(timings.values())}
    phases.update({f"pass {k}": v for k, v in timings.items()})
    start = time.perf_counter()
    lowered = compiled.executable.lower(*compiled.global_args(sig))
    phases["lower to StableHLO"] = time.perf_counter() - start
    (folder / "lowered.stablehlo.mlir").write_text(lowered.as_text())
    start = time.perf_counter()
    executable = lowered.compile()
    phases["XLA compile"] = time.perf_counter() - start
    (folder / "compiled.hlo.txt").write_text(executable.as_text())
    args = compiled.global_args(sig)
    for platform in dump_platforms():  # the program for hardware this machine may not have
        start = time.perf_counter()
        exported = compiled.executable.export(args, (platform,))
        phases[f"export for {platform}"] = time.perf_counter() - start
        (folder / f"exported.{platform}.stablehlo.mlir").write_text(exported.mlir_module())
        (folder / f"exported.{platform}.bin").write_bytes(exported.serialize())
    stats = collective_stats(compiled.module)
    (folder / "summary.txt").write_text(summary(compiled.module, stats, phases))
    if os.environ.get(HTML_ENV, "") not in ("", "0"):
        page = render_report(compiled_report(compiled, snapshots, phases, executable))
        (folder / "report.html").write_text(page, encoding="utf-8")
    graph = module_graph(compiled.module)
    dot = folder / "graph.dot"
    dot.write_text(to_dot(graph, compiled.module.name))
    if shutil.which("dot") and graph.number_of_nodes() <= SVG_OP_LIMIT:
        try:  # the SVG is a convenience: a failing or hanging Graphviz leaves the DOT alone
            subprocess.run(["dot", "-Tsvg", str(dot), "-o", str(folder / "graph.svg")], check=False,
                           capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass


def summary(module, stats, phases: dict[str, float]) -> str:
    """The human-readable report: collectives (with bucket tables) and compile time per phase."""
    ops = sum(1 for _ in module.walk())
    lines = [f"function @{module.name}: {ops} ops, {stats.num_replicas} replicas", "",
             "collectives (bytes moved per replica per step; a bucket lists its tensors):",
             stats.table(), "", "compile time per phase:"]
    lines += [f"  {name:<32} {seconds * 1000:10.1f} ms" for name, seconds in phases.items()]
    lines.append(f"  {'total':<32} {sum(phases.values()) * 1000:10.1f} ms")
    return "\n".join(lines) + "\n"
