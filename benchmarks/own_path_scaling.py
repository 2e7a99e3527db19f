"""strategax's own compile path against jax.jit's trace + lower, without XLA: the Transformer LM
of `first_call_scaling.py` at 2, 8, 32 layers, one fresh process per figure, CPU seconds.

strategax: its trace of the user's function, the import into the IR, the pass pipeline (and
each pass), then JAX's trace of the IR interpreter and the StableHLO lowering
(`Executable.jitted.trace(...).lower()`, the garbage collector paused as on a first call);
jax.jit: `jax.jit(...).trace(...)` and `.lower()`. Nothing is compiled by XLA, so a size takes
seconds where a first call takes minutes; the ratio is the one issue 36 sets (import + passes +
interpreter at most 30% of jax.jit's trace + lower, linear in the model).

Run: python benchmarks/own_path_scaling.py [--layers 2 8 32] [--rounds 1]
"""
import os
import sys

import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import jax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import numpy as np  # noqa: E402

import strategax as sx  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_lm as lm  # noqa: E402


def one(which: str, layers: int) -> dict:
    """This (fresh) process's CPU seconds for one side's trace and lowering."""
    devices = device.devices()
    strategy, mesh = sx.MirroredStrategy(devices), Mesh(np.array(devices), ("r",))
    model, params, pieces, gx, gy, jparams = lm.setup(strategy, mesh, layers)
    cpu = time.process_time
    if which == "jax":
        step = lm.make_jax_step(mesh, model)
        c0 = cpu()
        traced = step.trace(jparams, gx, gy)
        c1 = cpu()
        traced.lower()
        c2 = cpu()
        return {"trace": c1 - c0, "lower": c2 - c1, "total": c2 - c0}
    from strategax.backends import gc_pause
    from strategax.passes import manager
    from strategax.trace import function as function_module
    spent: dict = {}

    def timed(key, fn):
        def wrapper(*a, **k):
            start = cpu()
            try:
                return fn(*a, **k)
            finally:
                spent[key] = spent.get(key, 0.0) + cpu() - start
        return wrapper
    function_module.import_jaxpr = timed("import", function_module.import_jaxpr)
    function_module.StrategyFunction._trace = timed("own", function_module.StrategyFunction._trace)
    run = manager.PassManager.run

    def run_timed(self, module):
        start = cpu()
        try:
            return run(self, module)
        finally:
            spent["passes"] = cpu() - start
            spent["per_pass"] = dict(sorted(self.timings.items(), key=lambda kv: -kv[1]))
    manager.PassManager.run = run_timed
    manager.time = types.SimpleNamespace(perf_counter=cpu)  # the pass manager's per-pass times in CPU s
    step = lm.make_strategax_step(strategy, model)
    c0 = cpu()
    executable = step._specialization((params, pieces), {})[0].executable
    c1 = cpu()
    specs = [jax.ShapeDtypeStruct(lay.global_shape, lay.type.dtype, sharding=lay.sharding)
             for lay in executable.in_layouts]
    with gc_pause.paused():  # as Executable.__call__ lowers a first call
        traced = executable.jitted.trace(*specs)
        c2 = cpu()
        traced.lower()
        c3 = cpu()
    return {"trace": spent["own"] - spent["import"] - spent["passes"], "import": spent["import"],
            "passes": spent["passes"], "rest": c1 - c0 - spent["own"], "interpreter": c2 - c1, "lower": c3 - c2,
            "total": c3 - c0, "per_pass": spent["per_pass"]}


def fresh(which: str, layers: int, extra: list[str]) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", which, "--layers", str(layers), *extra],
                         env=dict(os.environ, STRATEGAX_COMPILATION_CACHE="0"), capture_output=True, text=True,
                         check=False)
    if out.returncode:
        raise RuntimeError(f"the {which} process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", choices=["sx", "jax"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.layers[0])))
        return
    extra = ["--device", args.device, "--cpu-devices", str(args.cpu_devices)]
    print(f"Transformer LM, width {lm.WIDTH}; CPU s, medians of {args.rounds} fresh processes per side")
    for layers in args.layers:
        runs: dict[str, list] = {"sx": [], "jax": []}
        for r in range(args.rounds):
            for w in (("sx", "jax") if r % 2 == 0 else ("jax", "sx")):
                runs[w].append(fresh(w, layers, extra))
        s = {k: statistics.median(r[k] for r in runs["sx"]) for k in runs["sx"][0] if k != "per_pass"}
        j = {k: statistics.median(r[k] for r in runs["jax"]) for k in runs["jax"][0]}
        passes = ", ".join(f"{k} {v:.3f}" for k, v in list(runs["sx"][0]["per_pass"].items())[:4])
        own = s["import"] + s["passes"] + s["interpreter"]
        print(f"{layers:3d} layers: strategax {s['total']:.2f} (trace {s['trace']:.3f} import {s['import']:.3f} passes "
              f"{s['passes']:.3f} [{passes}] interpreter {s['interpreter']:.3f} lower {s['lower']:.3f})  jax.jit "
              f"{j['total']:.2f} (trace {j['trace']:.3f} lower {j['lower']:.3f})  ratio {s['total'] / j['total']:.2f}  "
              f"import + passes + interpreter / jax.jit's {own / j['total']:.0%}", flush=True)


if __name__ == "__main__":
    main()
