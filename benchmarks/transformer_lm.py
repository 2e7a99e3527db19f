"""The flax Transformer LM step the scaling benchmarks share (`first_call_scaling.py`,
`bucket_size.py`): pre-norm blocks (causal self-attention, a 4x MLP), one SGD step of mean
next-token cross-entropy (in float32), written once for strategax and once by hand with
`jax.jit(jax.shard_map(...))` and per-tensor `lax.pmean`. Two sizes (`--size`): `small` (width 64,
float32: what grows is the depth; the CPU figures) and `xl` (issue 24's GPU size: width 1024,
sequence 512, bfloat16 compute over float32 parameters). Import `bench_device` before this.
"""
import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

import strategax as sx

LR = 0.05
WIDTH, HEADS, VOCAB, SEQ, ROWS = 64, 4, 256, 32, 8  # small width: what grows is the depth


@dataclasses.dataclass(frozen=True)
class Size:
    width: int
    heads: int
    vocab: int
    seq: int
    rows: int  # per replica
    dtype: Any  # the layers' compute dtype; parameters stay float32

    def describe(self) -> str:
        return (f"width {self.width}, sequence {self.seq}, {self.rows} rows per replica, "
                f"{jnp.dtype(self.dtype).name} compute")


SIZES = {"small": Size(WIDTH, HEADS, VOCAB, SEQ, ROWS, jnp.float32),
         "xl": Size(1024, 16, 8192, 512, 8, jnp.bfloat16)}


def add_argument(parser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="small: width 64, float32 (CPU); xl: width 1024, sequence 512, bfloat16 (GPU)")


class Block(nn.Module):
    width: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, h):
        causal = nn.make_causal_mask(jnp.ones(h.shape[:2], jnp.bool_))
        a = nn.LayerNorm(dtype=self.dtype)(h)
        h = h + nn.MultiHeadDotProductAttention(self.heads, dtype=self.dtype)(a, mask=causal)
        m = nn.Dense(4 * self.width, dtype=self.dtype)(nn.LayerNorm(dtype=self.dtype)(h))
        return h + nn.Dense(self.width, dtype=self.dtype)(nn.gelu(m))


class TransformerLM(nn.Module):
    layers: int
    width: int = WIDTH
    heads: int = HEADS
    vocab: int = VOCAB
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.width, dtype=self.dtype)
        h = embed(tokens)
        for _ in range(self.layers):
            h = Block(self.width, self.heads, self.dtype)(h)
        return embed.attend(nn.LayerNorm(dtype=self.dtype)(h))


def loss_fn(model, params, tokens, targets):
    logp = jax.nn.log_softmax(model.apply({"params": params}, tokens).astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def sgd(params, grads):
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def make_strategax_step(strategy, model, bytes_per_pack: int | None = None):
    """The step; `bytes_per_pack` None: strategax's default buckets, else that option."""
    options = None if bytes_per_pack is None else sx.CommunicationOptions(bytes_per_pack=bytes_per_pack)

    @strategy.function
    def step(params, batch):
        def replica_step(params, tokens, targets):
            loss, grads = jax.value_and_grad(lambda p: loss_fn(model, p, tokens, targets))(params)
            grads = sx.get_replica_context().all_reduce(sx.ReduceOp.MEAN, grads, options=options)
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


def setup(strategy, mesh, layers: int, size: str = "small"):
    """The model, its parameters (host arrays), the strategax batch (per-replica pieces: no padded
    rows) and the hand-written step's global arrays."""
    n, s = strategy.num_replicas_in_sync, SIZES[size]
    model = TransformerLM(layers, s.width, s.heads, s.vocab, s.dtype)
    rows = s.rows
    tokens = np.random.default_rng(0).integers(0, s.vocab, size=(n * rows, s.seq + 1)).astype(np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]
    params = jax.device_get(jax.jit(model.init)(jax.random.key(0), x[:1])["params"])
    pieces = strategy.experimental_distribute_values_from_function(
        lambda c: (x[c.replica_id_in_sync_group * rows:][:rows], y[c.replica_id_in_sync_group * rows:][:rows]))
    gx, gy = (jax.device_put(a, NamedSharding(mesh, P("r"))) for a in (x, y))
    return model, params, pieces, gx, gy, jax.device_put(params, NamedSharding(mesh, P()))
