"""How the IR tools scale: the default pass pipeline, printing and parsing on generated
modules of 100k and 1M ops (issue 5 targets: each under 2 s at 100k; 10x the ops at most 12x
the time). Prints seconds and the 1M/100k ratios. Passes run with the garbage collector
paused, as a compiler would (the module is all live objects; a collection mid-pass scans them all).

    PYTHONPATH=. python benchmarks/ir_scaling.py [--sizes 100000 1000000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from strategax import ir
from strategax.ir import Block, Func, Locality, Location, Module, Operation, TensorType, Value
from strategax.passes import default_pipeline

PER, MIR = Locality.PER_REPLICA, Locality.MIRRORED


def generate(num_ops: int, width: int = 16) -> Module:
    """A replica program: chains of elementwise ops over per-replica and mirrored values, with
    constants, identity conversions, duplicates, dead code and an all_reduce every ~25 ops."""
    t = TensorType((width,), np.float32)
    x = Value(t.with_locality(PER), "x")
    w = Value(t.with_locality(MIR), "w")
    ops: list[Operation] = []
    live = [x, w]
    outs: list[Value] = []
    k = 0

    def add(name, operands, attrs=None, ty=t):
        nonlocal k
        k += 1
        r = Value(ty, None)
        ops.append(Operation(name, operands, [r], attrs or {}, loc=Location("model.py", 10 + k % 500)))
        return r

    while len(ops) < num_ops:
        a, b = live[-1], live[-2]
        c = add("sx.constant", [], {"value": np.full((), 0.5 + (k % 7), np.float32)}, TensorType((), np.float32))
        m = add("jax.mul", [a, c], {"out_dtype": None})
        m2 = add("jax.mul", [a, c], {"out_dtype": None})  # a duplicate for cse
        s = add("jax.add", [m, b])
        e = add("jax.tanh", [s], {"accuracy": None})
        e = add("jax.convert_element_type", [e], {"new_dtype": np.dtype(np.float32), "weak_type": False,
                                                  "sharding": None})  # an identity for canonicalize
        add("jax.neg", [m2])  # dead code
        d = add("jax.sub", [e, m2])
        live.append(d)
        if k % 25 < 8:
            r = add("sx.all_reduce", [d], {"op": "sum", "reason": "gradient"})
            outs.append(r)
            live.append(add("jax.mul", [r, w], {"out_dtype": None}))
    return Module("generated", {"num_replicas": 8}, funcs=[Func("main", Block([x, w], ops, outs + [live[-1]]))])


def timed(fn, repeat: int) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of `repeat` calls (CPU time is what this process
    used: on a shared machine it is the figure other processes disturb least)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
    return wall, cpu


def measure(num_ops: int, repeat: int) -> dict:
    text = ir.print_module(generate(num_ops))
    module = ir.parse(text)
    out: dict = {"ops": sum(1 for _ in module.walk())}
    gc.collect()
    gc.disable()
    try:
        out["print"] = timed(lambda: ir.print_module(module), repeat)
        out["parse"] = timed(lambda: ir.parse(text), repeat)
        fresh = [ir.parse(text) for _ in range(repeat)]  # parsed outside the timed region
        managers = []

        def pipeline():
            pm = default_pipeline()
            pm.run(fresh.pop())
            managers.append(pm)

        out["pipeline"] = timed(pipeline, repeat)
        out["passes"] = min((pm.timings for pm in managers), key=lambda t: sum(t.values()))
    finally:
        gc.enable()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                    help="accepted as by every benchmark; this one runs no device program")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    results = {}
    for n in args.sizes:
        r = results[n] = measure(n, args.repeat)
        print(f"{r['ops']:>9} ops (wall / cpu s): " + ", ".join(
            f"{k} {r[k][0]:.3f} / {r[k][1]:.3f}" for k in ("pipeline", "print", "parse")))
        print("           per pass (wall s): " + ", ".join(f"{k} {v:.3f}" for k, v in r["passes"].items()))
    sizes = sorted(results)
    for small, big in zip(sizes, sizes[1:]):
        factor = results[big]["ops"] / results[small]["ops"]
        ratios = {k: (results[big][k][0] / results[small][k][0], results[big][k][1] / results[small][k][1])
                  for k in ("pipeline", "print", "parse")}
        print(f"{factor:.1f}x the ops costs (wall / cpu): " + ", ".join(
            f"{k} x{w:.1f} / x{c:.1f}" for k, (w, c) in ratios.items()))


if __name__ == "__main__":
    main()
