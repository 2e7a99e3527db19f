"""`sx.profile(f, *args, steps=N, logdir=...)`: a profiler trace of N steps and where their time
went per IR op kind, collectives first.

The trace is JAX's (`jax.profiler.trace`: TensorBoard's profile plugin reads `logdir`; its HLO
carries each op's IR name and the user's line, see `backends/metadata.py`). XLA's runtime names
its trace events after HLO instructions (`psum.7`), so beside JAX's Perfetto trace strategax
writes `strategax.trace.json.gz`, the same events with each op of the program renamed after its
IR op and line (`sx.all_reduce (gradients) train.py:52`; `hlo_op` keeps XLA's name): open it
in Perfetto (ui.perfetto.dev) or chrome://tracing.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import jax

from ...ir import is_collective
from ..distributed_values import DistributedValues
from .hlo_metadata import OpMetadata, hlo_metadata, ir_op_of

ANNOTATED = "strategax.trace.json.gz"
_NUMBER = re.compile(r"[._]\d+$")


@dataclass(frozen=True)
class ProfileRow:
    kind: str  # the IR op's name (`sx.all_reduce`, `jax.dot_general`), or "XLA dot (no IR op)" for
    # an instruction XLA made without metadata
    seconds_per_step: float  # mean over the devices, self time (a loop's body counts in its ops)
    events: int  # XLA op executions seen, all steps and devices
    collective: bool


@dataclass
class Profile:
    """What `sx.profile` measured: `rows` (time per IR op kind per step, collectives first),
    `trace_dir` (the run's folder under logdir) and `trace_file` (the annotated trace)."""
    name: str
    steps: int
    devices: int
    trace_dir: Path
    trace_file: Path
    rows: list[ProfileRow] = field(default_factory=list)

    @property
    def seconds_per_step(self) -> float:
        return sum(r.seconds_per_step for r in self.rows)

    def table(self) -> str:
        total = self.seconds_per_step or 1.0
        lines = [f"sx.profile: {self.name}, {self.steps} step(s) on {self.devices} device(s); where a step's "
                 f"time went (XLA ops, self time, mean per device):",
                 f"  {'IR op':<28} {'per step':>12} {'share':>7} {'events':>8}"]
        for r in self.rows:
            tag = "  collective" if r.collective else ""
            lines.append(f"  {r.kind:<28} {r.seconds_per_step * 1e3:>9.3f} ms {r.seconds_per_step / total:>6.1%} "
                         f"{r.events:>8}{tag}")
        lines.append(f"  {'total':<28} {self.seconds_per_step * 1e3:>9.3f} ms")
        lines.append(f"trace: {self.trace_dir} (tensorboard --logdir); with IR names: {self.trace_file} (Perfetto)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _module_name(hlo_text: str) -> str:
    m = re.match(r"HloModule (\S+?),?\s", hlo_text)
    return m.group(1) if m else ""


def _self_times(events: list[dict]) -> dict[int, float]:
    """Each event's duration less its children's on the same thread (a loop's own time)."""
    out: dict[int, float] = {}
    threads = defaultdict(list)
    for i, e in enumerate(events):
        threads[(e.get("pid"), e.get("tid"))].append(i)
    for ids in threads.values():
        ids.sort(key=lambda i: (events[i]["ts"], -events[i].get("dur", 0)))
        stack: list[int] = []
        for i in ids:
            e = events[i]
            out[i] = float(e.get("dur", 0))
            while stack and events[stack[-1]]["ts"] + events[stack[-1]].get("dur", 0) <= e["ts"]:
                stack.pop()
            if stack:
                out[stack[-1]] -= max(0.0, out[i])
            stack.append(i)
    return out


def _annotate(events: list[dict], program: list[int], meta: dict[str, OpMetadata]) -> None:
    for i in program:
        e = events[i]
        m = meta.get(e["args"]["hlo_op"])
        if m is None or not m.ir_op:
            continue
        where = f"{m.file}:{m.line}" if m.file else ""
        e["name"] = f"{m.ir_op} {where}".strip()
        e["args"] = {**e["args"], "ir_op": m.ir_op, "source": where, "op_name": m.op_name}


def _kind(args: dict, meta: dict[str, OpMetadata]) -> str:
    """The IR op kind of an XLA op event: from the compiled HLO's metadata, else from the op
    name the event carries (GPU kernels do), else XLA's own name without its number (a
    `command_buffer`: XLA:GPU runs the step as CUDA graphs unless told otherwise, see sx.profile)."""
    m = meta.get(args["hlo_op"])
    if m is not None and m.ir_kind:
        return m.ir_kind
    named = ir_op_of(args.get("name", "") or args.get("long_name", ""))
    if named:
        return named.split(" (", 1)[0]
    opcode = m.opcode if m is not None else _NUMBER.sub("", args["hlo_op"])
    return f"XLA {opcode} (no IR op)"


def summarize(trace: dict, hlo_text: str, collectives: set[str], name: str, steps: int,
              trace_dir: Path, trace_file: Path) -> Profile:
    """Rename the program's XLA op events in `trace` (Perfetto JSON, in place) and sum their
    self time per IR op kind."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    module, meta = _module_name(hlo_text), hlo_metadata(hlo_text)
    program = [i for i, e in enumerate(events)
               if e.get("ph") == "X" and "hlo_op" in e.get("args", {})
               and e["args"].get("hlo_module", module) == module]
    times = _self_times([events[i] for i in program])
    devices = {events[i]["args"].get("device_ordinal", events[i].get("pid")) for i in program}
    per_kind: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for k, i in enumerate(program):
        kind = _kind(events[i]["args"], meta)
        per_kind[kind][0] += times[k]
        per_kind[kind][1] += 1
    _annotate(events, program, meta)
    scale = 1e-6 / (steps * max(len(devices), 1))  # microseconds, all devices -> seconds per device
    rows = [ProfileRow(kind, us * scale, n, kind in collectives) for kind, (us, n) in per_kind.items()]
    rows.sort(key=lambda r: (not r.collective, -r.seconds_per_step))
    return Profile(name, steps, len(devices), trace_dir, trace_file, rows)


def _arrays(out) -> list:
    leaves = jax.tree_util.tree_leaves(out, is_leaf=lambda x: isinstance(x, DistributedValues))
    return [a for x in leaves for a in (x.values if isinstance(x, DistributedValues) else (x,))]


def _latest_run(logdir: Path, before: set[Path]) -> Path:
    runs = [p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir() and p not in before]
    if not runs:
        raise RuntimeError(f"jax.profiler wrote no trace under {logdir}")
    return max(runs, key=lambda p: p.stat().st_mtime)


def profile(f, *args, steps: int = 5, logdir: str | os.PathLike = "strategax-profile", **kwargs) -> Profile:
    """Run `f(*args, **kwargs)` `steps` times under JAX's profiler, writing the trace under
    `logdir`; print and return where a step's time went per IR op kind, collectives first.

    On GPU, XLA runs a step's kernels as CUDA graphs ("command buffers"), which the trace shows
    as one event each: set `XLA_FLAGS=--xla_gpu_enable_command_buffer=` before JAX starts to see
    (and attribute) each op."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"sx.profile: steps must be a positive int, not {steps!r}")
    logdir = Path(logdir)
    compiled, _ = f._specialization(args, kwargs)  # trace and compile before the trace starts
    hlo_text = f.hlo(*args, **kwargs)
    collectives = {op.name for op in compiled.module.walk() if is_collective(op)}
    before = set((logdir / "plugins" / "profile").glob("*"))
    with jax.profiler.trace(str(logdir), create_perfetto_trace=True):
        out = None
        for _ in range(steps):
            out = f(*args, **kwargs)
        jax.block_until_ready(_arrays(out))
    run = _latest_run(logdir, before)
    with gzip.open(run / "perfetto_trace.json.gz", "rt") as fh:
        trace = json.load(fh)
    result = summarize(trace, hlo_text, collectives, f._name, steps, run, run / ANNOTATED)
    with gzip.open(result.trace_file, "wt") as fh:
        json.dump(trace, fh)
    print(result.table())
    return result
