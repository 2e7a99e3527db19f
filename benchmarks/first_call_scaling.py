"""First call of a flax Transformer LM step as the model grows (2, 8, 32 layers, width 64,
sequence 32, 8 rows per replica): strategax against the same step hand-written with
`jax.jit(jax.shard_map(...))` and per-tensor `lax.pmean`, each first call in a fresh process
(after imports and the model's init), cold (compilation cache off) and warm (an earlier process
compiled the same program into a cache folder of its own), with the split:

- strategax: `own` (tracing the user's function to a jaxpr, importing it into the IR, the pass
  pipeline: `trace` / `import` / `passes`), `lower` (JAX tracing strategax's interpreter and
  lowering it to StableHLO), `xla` (XLA's compilation, or loading it from the cache);
- jax.jit: `trace` and `lower` (JAX's jaxpr trace and its lowering) and `xla`.

Each figure is the median over --rounds fresh processes, the two sides alternating; the
machine these ran on is shared, so compare ratios, and the ratio of the first calls' CPU time
(`time.process_time`: every thread of the process), which other jobs disturb least. Prints
two lines per size and mode: wall seconds, then CPU seconds split at JAX's own events (own:
strategax's trace + import + passes, or jax.jit's trace; lower: up to the StableHLO module,
strategax's interpreter trace included; xla; run: the first run and the rest of the call).

`--size xl` is issue 24's GPU size (8 layers x 1024, sequence 512, bfloat16 compute).

Run: python benchmarks/first_call_scaling.py [--layers 2 8 32] [--rounds 3] [--modes cold warm]
     [--size small|xl] [--device auto|cpu|gpu]
"""
import os
import sys

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
from jax import monitoring  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import numpy as np  # noqa: E402

import strategax as sx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_lm as lm  # noqa: E402

TRACE, TO_MLIR, COMPILE = ("/jax/core/compile/jaxpr_trace_duration",
                           "/jax/core/compile/jaxpr_to_mlir_module_duration",
                           "/jax/core/compile/backend_compile_duration")


def one(which: str, layers: int, cache: str, size: str) -> dict:
    """One first call in this (fresh) process; its phases in seconds."""
    devices = device.devices()
    strategy, mesh = sx.MirroredStrategy(devices), Mesh(np.array(devices), ("r",))
    model, params, pieces, gx, gy, jparams = lm.setup(strategy, mesh, layers, size)
    if which == "jax" and cache != "0":  # the same cache rule strategax uses: every program written
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    events: dict[str, list[float]] = {}
    marks: list[tuple[str, float]] = []  # (event, CPU time when JAX reported it): the CPU split

    def listen(event, duration_secs, **kw):
        events.setdefault(event, []).append(duration_secs)
        marks.append((event, time.process_time()))
    monitoring.register_event_duration_secs_listener(listen)
    phases: dict[str, float] = {}
    if which == "sx":
        from strategax.trace import function as function_module
        from strategax.passes import manager
        trace = function_module.StrategyFunction._trace
        importer, pipeline = function_module.import_jaxpr, manager.PassManager.run

        def timed(key, fn):
            def wrapper(*a, **k):
                start, cpu = time.perf_counter(), time.process_time()
                try:
                    return fn(*a, **k)
                finally:
                    phases[key] = phases.get(key, 0.0) + time.perf_counter() - start
                    phases[key + "_cpu"] = phases.get(key + "_cpu", 0.0) + time.process_time() - cpu
            return wrapper
        function_module.StrategyFunction._trace = timed("own", trace)
        function_module.import_jaxpr = timed("import", importer)
        manager.PassManager.run = timed("passes", pipeline)
        step = lm.make_strategax_step(strategy, model)
        events.clear()
        marks.clear()
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(step(params, pieces))
        total, phases["cpu"] = time.perf_counter() - start, time.process_time() - cpu
        function_module.StrategyFunction._trace = trace
        xla = sum(events.get(COMPILE, []))
        phases["trace"] = phases["own"] - phases["import"] - phases["passes"]
        phases.update(total=total, xla=xla, lower=total - phases["own"] - xla)
        phases.update(cpu_split(marks, cpu, phases["cpu"], cpu + phases["own_cpu"]))
    else:
        step = lm.make_jax_step(mesh, model)
        events.clear()
        marks.clear()
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(step(jparams, gx, gy))
        total, phases["cpu"] = time.perf_counter() - start, time.process_time() - cpu
        xla = sum(events.get(COMPILE, []))
        trace = max(events.get(TRACE, [0.0]))
        phases.update(total=total, xla=xla, trace=trace, lower=total - xla - trace)
        phases.update(cpu_split(marks, cpu, phases["cpu"], None))
    return phases


def cpu_split(marks: list[tuple[str, float]], start: float, total: float, own_end: float | None) -> dict:
    """The first call's CPU time by phase, from the CPU time at each of JAX's events: `own_cpu`
    (strategax: up to the end of its passes; jax.jit: its trace), `lower_cpu` (to the end of the
    StableHLO lowering), `xla_cpu` (XLA's compilation) and `run_cpu` (the rest: the run)."""
    to_mlir = [c for e, c in marks if e == TO_MLIR]
    compiled = [c for e, c in marks if e == COMPILE]
    traced = [c for e, c in marks if e == TRACE]
    own_end = own_end if own_end is not None else (traced[-1] if traced else start)
    lower_end = to_mlir[-1] if to_mlir else own_end
    xla_end = compiled[-1] if compiled else lower_end
    return {"own_cpu": own_end - start, "lower_cpu": lower_end - own_end, "xla_cpu": xla_end - lower_end,
            "run_cpu": start + total - xla_end}


def fresh(which: str, layers: int, cache: str, extra: list[str]) -> dict:
    """One first call in a fresh process; its phases."""
    env = dict(os.environ, STRATEGAX_COMPILATION_CACHE=cache)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", which, "--layers", str(layers),
                          "--cache", cache, *extra], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"the {which} process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=["cold", "warm"], default=["cold", "warm"])
    lm.add_argument(parser)
    parser.add_argument("--one", choices=["sx", "jax"], help=argparse.SUPPRESS)
    parser.add_argument("--cache", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.layers[0], args.cache, args.size)))
        return
    extra = ["--device", args.device, "--cpu-devices", str(args.cpu_devices), "--size", args.size]
    print(device.describe(device.devices()))
    print(f"Transformer LM, {lm.SIZES[args.size].describe()}; medians of {args.rounds} fresh processes each")
    for layers in args.layers:
        for mode in args.modes:
            folders = {w: tempfile.mkdtemp(prefix=f"fcs-{w}-") for w in ("sx", "jax")} if mode == "warm" else {}
            try:
                if folders:  # one process compiles each side's program into its folder
                    for w in ("sx", "jax"):
                        fresh(w, layers, folders[w], extra)
                runs: dict[str, list] = {"sx": [], "jax": []}
                for r in range(args.rounds):
                    for w in (("sx", "jax") if r % 2 == 0 else ("jax", "sx")):
                        runs[w].append(fresh(w, layers, folders.get(w, "0"), extra))
            finally:
                for f in folders.values():
                    shutil.rmtree(f, ignore_errors=True)
            s, j = median(runs["sx"]), median(runs["jax"])
            ratio = statistics.median(a["total"] / b["total"] for a, b in zip(runs["sx"], runs["jax"]))
            cpu_ratio = statistics.median(a["cpu"] / b["cpu"] for a, b in zip(runs["sx"], runs["jax"]))
            print(f"{layers:3d} layers {mode:4s}: strategax {s['total']:6.2f} s (own {s['own']:.2f}: trace "
                  f"{s['trace']:.2f} import {s['import']:.2f} passes {s['passes']:.2f}; lower {s['lower']:.2f}; "
                  f"xla {s['xla']:.2f})  jax.jit {j['total']:6.2f} s (trace {j['trace']:.2f} lower "
                  f"{j['lower']:.2f} xla {j['xla']:.2f})  ratio {ratio:.3f} (CPU time {cpu_ratio:.3f})  "
                  f"own-trace / jax trace+lower {(s['own'] - s['trace']) / (j['trace'] + j['lower']):.2f}",
                  flush=True)
            print(f"{'':16s}CPU s: strategax {s['cpu']:6.2f} (own {s['own_cpu']:.2f}: import {s['import_cpu']:.2f} "
                  f"passes {s['passes_cpu']:.2f}; lower {s['lower_cpu']:.2f}; xla {s['xla_cpu']:.2f}; run "
                  f"{s['run_cpu']:.2f})  jax.jit {j['cpu']:6.2f} (trace {j['own_cpu']:.2f} lower {j['lower_cpu']:.2f} "
                  f"xla {j['xla_cpu']:.2f} run {j['run_cpu']:.2f})  (own + lower) / jax (trace + lower) "
                  f"{(s['own_cpu'] + s['lower_cpu']) / (j['own_cpu'] + j['lower_cpu']):.2f}", flush=True)


if __name__ == "__main__":
    main()
