"""Gradients compressed on the wire: the data-parallel MLP step of step_vs_jax.py with its
gradients' all_reduce sent in bfloat16 (`CommunicationOptions(compression="bf16")`, the
compress-collectives pass) against the same step in float32, timed interleaved in one
process. Prints the gradients' tensor bytes and the bytes each replica moves per step (from
`f.stats()`: the target is 0.5x; one replica has no all-reduce), the loss after the same
steps both ways, and the median step-time ratio.
On simulated CPU devices the "wire" is memory and XLA:CPU sums bf16 in float32, so the time is
no gain there; on GPUs the all-reduce moves half the bytes.

Run: python benchmarks/compressed_gradients.py [--steps N] [--rounds R] [--model small|large] [--dtype bf16|f16]
     [--device auto|cpu|gpu]
"""
import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402

import jax  # noqa: E402

import strategax as sx  # noqa: E402
from step_vs_jax import MODELS, init_params, make_batch, make_strategax_step, strategy_and_mesh, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    parser.add_argument("--steps", type=int, default=20, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    args = parser.parse_args()

    strategy, _ = strategy_and_mesh()
    sizes, global_batch = MODELS[args.model]
    x, y = make_batch(sizes, global_batch)
    params0 = init_params(sizes)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    plain = make_strategax_step(strategy)
    narrow = make_strategax_step(strategy, sx.CommunicationOptions(compression=args.dtype))

    def gradient_bytes(step, what: str) -> int:
        return sum(getattr(c, what) for c in step.stats(params0, batch).collectives if c.kind == "mean")

    for what, name in (("payload_bytes", "tensor bytes"), ("bytes_moved", "bytes moved per replica per step")):
        b_plain, b_narrow = gradient_bytes(plain, what), gradient_bytes(narrow, what)
        ratio = (f"ratio {b_narrow / b_plain:.3f}  (target 0.5)" if b_plain
                 else "(one replica: the program has no all-reduce)")
        print(f"gradient all-reduce {name}: float32 {b_plain}   {args.dtype} {b_narrow}   {ratio}")

    state = {"plain": params0, "narrow": params0}
    losses = {}

    def run(name, step):
        def go():
            state[name], losses[name] = step(state[name], batch)
            return losses[name]
        return go

    run_plain, run_narrow = run("plain", plain), run("narrow", narrow)
    for _ in range(3):
        run_plain(), run_narrow()
    ratios, t_plain, t_narrow = [], [], []
    for r in range(args.rounds):  # alternate which goes first
        if r % 2:
            b = timed(run_narrow, args.steps)
            a = timed(run_plain, args.steps)
        else:
            a = timed(run_plain, args.steps)
            b = timed(run_narrow, args.steps)
        t_plain.append(a), t_narrow.append(b), ratios.append(b / a)
    steps = 3 + args.rounds * args.steps
    print(f"loss after {steps} steps: float32 {float(losses['plain']):.6f}"
          f"   {args.dtype} {float(losses['narrow']):.6f}")
    print(f"MLP step ({'-'.join(map(str, sizes))}, batch {global_batch})"
          f"  float32 {statistics.median(t_plain) * 1e3:8.3f} ms"
          f"   {args.dtype} gradients {statistics.median(t_narrow) * 1e3:8.3f} ms   median ratio "
          f"{statistics.median(ratios):.3f}")
    jax.block_until_ready(losses["narrow"])


if __name__ == "__main__":
    main()
