"""A bfloat16 training step of a small flax Transformer language model (`dtype=jnp.bfloat16`,
float32 parameters: mixed precision as flax users write it) with strategax against the same
step hand-written with `jax.jit(jax.shard_map(...))`, timed interleaved in one process with an
identical hand-written step as the control. `--model small` (the CPU figure: 2 layers x 64,
sequence 32, global batch 64 over 8 simulated CPU devices), `--model large` (a GPU's: 4 layers x
512, sequence 256, 32 rows per device), `--model xl` (issue 24's size: 8 layers x 1024, sequence
512, 8 rows per device); `--model auto` picks small on the CPU, large on a GPU. Prints each
side's first call (trace, passes, compile) and the median step-time ratio.

Run: python benchmarks/transformer_bf16.py [--device auto|cpu|gpu] [--model auto|small|large|xl]
     [--steps N] [--rounds R]
"""
import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import strategax as sx  # noqa: E402
from step_vs_jax import global_array, strategy_and_mesh, timed  # noqa: E402

LR = 0.05
# layers, width, heads, vocabulary, sequence, rows per replica
MODELS = {"small": (2, 64, 4, 256, 32, 8), "large": (4, 512, 8, 8192, 256, 32), "xl": (8, 1024, 16, 8192, 512, 8)}


class Block(nn.Module):
    """Pre-norm: causal self-attention, then a 4x MLP, each added back."""
    width: int
    heads: int

    @nn.compact
    def __call__(self, h):
        a = nn.LayerNorm(dtype=jnp.bfloat16)(h)
        causal = nn.make_causal_mask(jnp.ones(h.shape[:2], jnp.bool_))
        h = h + nn.MultiHeadDotProductAttention(self.heads, dtype=jnp.bfloat16)(a, mask=causal)
        m = nn.Dense(4 * self.width, dtype=jnp.bfloat16)(nn.LayerNorm(dtype=jnp.bfloat16)(h))
        return h + nn.Dense(self.width, dtype=jnp.bfloat16)(nn.gelu(m))


class TransformerLM(nn.Module):
    layers: int
    width: int
    heads: int
    vocab: int

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.width, dtype=jnp.bfloat16)
        h = embed(tokens)
        for _ in range(self.layers):
            h = Block(self.width, self.heads)(h)
        return embed.attend(nn.LayerNorm(dtype=jnp.bfloat16)(h))


def loss_fn(model, params, tokens, targets):
    """Mean next-token cross-entropy, in float32."""
    logp = jax.nn.log_softmax(model.apply({"params": params}, tokens).astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def make_strategax_step(strategy, model):
    @strategy.function
    def step(params, batch):
        def replica_step(params, tokens, targets):
            loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, tokens, targets))(params)
            grads = sx.get_replica_context().all_reduce(sx.ReduceOp.MEAN, grads)
            return sgd(params, grads), loss
        params, loss = strategy.run(replica_step, args=(params, *batch))
        return params, strategy.reduce(sx.ReduceOp.MEAN, loss)
    return step


def make_jax_step(mesh, model):
    def replica_step(params, tokens, targets):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, tokens, targets))(params)
        return sgd(params, lax.pmean(grads, "r")), lax.pmean(loss, "r")
    mapped = jax.shard_map(replica_step, mesh=mesh, in_specs=(P(), P("r"), P("r")), out_specs=(P(), P()),
                           check_vma=False)
    return jax.jit(mapped)


def first_call(fn):
    """`fn()` once, blocked on; its result and the seconds it took."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10, help="steps per timing round")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--model", choices=["auto", *sorted(MODELS)], default="auto",
                        help="auto: small on the CPU, large on a GPU")
    device.add_argument(parser)
    args = parser.parse_args()
    size = args.model if args.model != "auto" else ("large" if device.platform() == "gpu" else "small")
    layers, width, heads, vocab, seq, rows = MODELS[size]

    strategy, mesh = strategy_and_mesh()
    n = strategy.num_replicas_in_sync
    model = TransformerLM(layers, width, heads, vocab)
    tokens = np.random.default_rng(0).integers(0, vocab, size=(n * rows, seq + 1)).astype(np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]
    params0 = jax.jit(model.init)(jax.random.key(0), x[:1])["params"]

    sx_step = make_strategax_step(strategy, model)
    batch = next(iter(strategy.experimental_distribute_dataset([(x, y)])))
    # the same batch as per-replica pieces: no padded rows to mask, the hand-written program
    pieces = strategy.experimental_distribute_values_from_function(
        lambda c: (x[c.replica_id_in_sync_group * rows:][:rows], y[c.replica_id_in_sync_group * rows:][:rows]))
    jax_step, jax_twin = make_jax_step(mesh, model), make_jax_step(mesh, model)
    gx, gy = (jax.device_put(a, NamedSharding(mesh, P("r"))) for a in (x, y))
    p_jax0 = jax.device_put(params0, NamedSharding(mesh, P()))

    # Same numbers first: one step of each from the same start. Both run the same bfloat16
    # operations; XLA may fuse them differently around strategax's collectives, and a bfloat16
    # rounding that flips is 2**-8 of a value: the float32 loss agrees to well within 1e-2.
    (p_sx, l_sx), c_sx = first_call(lambda: sx_step(params0, batch))
    (p_jax, l_jax), c_jax = first_call(lambda: jax_step(p_jax0, gx, gy))
    np.testing.assert_allclose(float(global_array(l_sx)), float(l_jax), rtol=1e-2)
    np.testing.assert_allclose(float(global_array(sx_step(params0, pieces)[1])), float(l_jax), rtol=1e-2)
    state = {"sx": p_sx, "unmasked": p_sx, "jax": p_jax, "twin": p_jax}

    def run_sx():
        state["sx"], loss = sx_step(state["sx"], batch)
        return loss

    def run_unmasked():
        state["unmasked"], loss = sx_step(state["unmasked"], pieces)
        return loss

    def run_jax():
        state["jax"], loss = jax_step(state["jax"], gx, gy)
        return loss

    def run_twin():
        state["twin"], loss = jax_twin(state["twin"], gx, gy)
        return loss

    order = [run_sx, run_jax, run_unmasked, run_twin]
    for _ in range(2):
        [fn() for fn in order]
    times = {fn: [] for fn in order}
    for r in range(args.rounds):  # each round starts with a different one of the four
        for fn in order[r % 4:] + order[:r % 4]:
            times[fn].append(timed(fn, args.steps))
    ratio = {fn: statistics.median(a / b for a, b in zip(times[fn], times[run_jax])) for fn in order}
    ms = {fn: statistics.median(times[fn]) * 1e3 for fn in order}
    name = f"bf16 Transformer step ({layers} layers x {width}, sequence {seq}, batch {n * rows})"
    print(f"{name}  first call: strategax {c_sx:.2f} s, jax.jit {c_jax:.2f} s")
    print(f"{name}  strategax {ms[run_sx]:8.3f} ms   jax.shard_map {ms[run_jax]:8.3f} ms   "
          f"median ratio {ratio[run_sx]:.3f}  (dataset batch, padded rows masked)")
    print(f"{name}  strategax {ms[run_unmasked]:8.3f} ms   (per-replica batch, no masks: the hand-written "
          f"program)  median ratio {ratio[run_unmasked]:.3f}  "
          f"(control: two identical hand-written steps {ratio[run_twin]:.3f})")


if __name__ == "__main__":
    main()
