"""Every layer of flax.linen that a model uses, trained 3 SGD steps on 8 replicas from
`experimental_distribute_dataset` batches (two full, then a partial last one), in float32 and
in bfloat16 compute (flax's `dtype=` with float32 parameters), against the same step
hand-written with `jax.jit(jax.shard_map(...))`. The hand-written step is told which rows are
real (per-replica masks, flax BatchNorm's `mask=`); strategax is not: it masks padded rows
itself."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import strategax as sx

R = 8  # replicas
BATCHES = (16, 16, 15)  # global batches: 2 rows a replica, then 2 on replicas 0-6 and 1 on 7
LR = 0.1


class ConvNet(nn.Module):
    """Conv, BatchNorm (batch_stats), max pooling, ConvTranspose, GroupNorm, average pooling, Dense."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, mask=None):
        x = nn.Conv(4, (3, 3), dtype=self.dtype)(x)
        bn_mask = None if mask is None else mask[:, None, None, None]
        x = nn.BatchNorm(use_running_average=False, momentum=0.9, dtype=self.dtype)(x, mask=bn_mask)
        x = nn.max_pool(nn.relu(x), (2, 2), strides=(2, 2))
        x = nn.ConvTranspose(4, (3, 3), strides=(2, 2), dtype=self.dtype)(x)
        x = nn.GroupNorm(num_groups=2, dtype=self.dtype)(x)
        x = nn.avg_pool(nn.relu(x), (2, 2), strides=(2, 2))
        return nn.Dense(3, dtype=self.dtype)(x.reshape(x.shape[0], -1))


def image_data(n):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 6, 6, 2)).astype(np.float32), rng.integers(0, 3, size=(n,)).astype(np.int32)


VOCAB = 11


class Block(nn.Module):
    """A pre-norm Transformer block: LayerNorm, self-attention under a causal and padding mask
    with attention dropout, Dropout, then RMSNorm and a two-headed MLP of DenseGenerals."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, h, mask):
        a = nn.LayerNorm(dtype=self.dtype)(h)
        a = nn.MultiHeadDotProductAttention(2, dtype=self.dtype, dropout_rate=0.1, deterministic=False)(a, mask=mask)
        h = h + nn.Dropout(0.1, deterministic=False)(a)
        m = nn.DenseGeneral((2, 4), dtype=self.dtype)(nn.RMSNorm(dtype=self.dtype)(h))
        return h + nn.DenseGeneral(h.shape[-1], axis=(-2, -1), dtype=self.dtype)(nn.gelu(m))


class Transformer(nn.Module):
    """Embed, a rematerialized (nn.remat) Block, LayerNorm, and logits from the embedding."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens, mask=None):
        embed = nn.Embed(VOCAB, 8, dtype=self.dtype)
        real = tokens > 0  # token 0 pads a sequence
        attend = nn.combine_masks(nn.make_causal_mask(tokens), nn.make_attention_mask(real, real))
        h = nn.remat(Block)(dtype=self.dtype)(embed(tokens), attend)
        return embed.attend(nn.LayerNorm(dtype=self.dtype)(h))


def token_data(n):
    """Token ids 1..VOCAB-1, each sequence ending in 0-3 padding tokens (id 0); per-token labels."""
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, VOCAB, size=(n, 6)).astype(np.int32)
    tokens[np.arange(6) >= 6 - rng.integers(0, 4, size=(n, 1))] = 0
    return tokens, rng.integers(0, VOCAB, size=(n, 6)).astype(np.int32)


class Recurrent(nn.Module):
    """nn.RNN over an LSTMCell, then a GRUCell; nn.Bidirectional over OptimizedLSTMCells; an
    LSTMCell under nn.scan (parameters broadcast over time); a Dense per step."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, mask=None):
        h = nn.RNN(nn.LSTMCell(4, dtype=self.dtype))(x)
        h = nn.RNN(nn.GRUCell(4, dtype=self.dtype))(h)
        h = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(3, dtype=self.dtype)),
                             nn.RNN(nn.OptimizedLSTMCell(3, dtype=self.dtype)))(h)
        scan = nn.scan(nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=1, out_axes=1)(4, dtype=self.dtype)
        carry = scan.initialize_carry(jax.random.key(0), h[:, 0].shape)
        _, h = scan(carry, h)
        return nn.Dense(3, dtype=self.dtype)(h)


def sequence_data(n):
    """Sequences of 5 steps of 2 features; a label per step."""
    rng = np.random.default_rng(3)
    return rng.normal(size=(n, 5, 2)).astype(np.float32), rng.integers(0, 3, size=(n, 5)).astype(np.int32)


MODELS = {"conv": (ConvNet, image_data), "transformer": (Transformer, token_data),
          "recurrent": (Recurrent, sequence_data)}


def per_example_loss(logits, y):
    """Cross-entropy per example (per token for sequences), in float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0]


def init(model, x):
    """Variables of the shapes flax makes, drawn with NumPy (compiling flax's initializers and
    forward pass would cost more than the steps): kernels and embeddings N(0, 1/fan-in), biases
    N(0, 0.1^2), scales 1 + N(0, 0.1^2); BatchNorm's running mean 0 and variance 1."""
    shapes = jax.eval_shape(lambda: model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x[:2]))
    rng = np.random.default_rng(0)

    def draw(path, s):
        name, noise = path[-1].key, rng.normal(size=s.shape).astype(s.dtype)
        fixed = {"mean": np.zeros(s.shape, s.dtype), "var": np.ones(s.shape, s.dtype),
                 "bias": 0.1 * noise, "scale": 1 + 0.1 * noise}
        return fixed.get(name, noise / np.sqrt(np.prod(s.shape[:-1])))

    variables = jax.tree_util.tree_map_with_path(draw, shapes)
    return variables["params"], variables.get("batch_stats", {})


def strategax_step(strategy, model):
    """The step as a strategax user writes it: plain flax code, means over the replica's batch,
    gradients and batch statistics all-reduced (MEAN), dropout keyed per replica."""
    @strategy.function
    def step(params, stats, key, batch):
        def replica(params, stats, key, x, y):
            ctx = sx.get_replica_context()
            rngs = {"dropout": jax.random.fold_in(key, ctx.replica_id_in_sync_group)}

            def loss_fn(p):
                logits, new = model.apply({"params": p, "batch_stats": stats}, x, rngs=rngs, mutable=["batch_stats"])
                return jnp.mean(per_example_loss(logits, y)), new.get("batch_stats", {})

            (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            grads, new_stats = ctx.all_reduce(sx.ReduceOp.MEAN, (grads, new_stats))
            return jax.tree.map(lambda p, g: p - LR * g, params, grads), new_stats, loss

        params, stats, loss = strategy.run(replica, args=(params, stats, key, *batch))
        return params, stats, strategy.reduce(sx.ReduceOp.MEAN, loss)
    return step


def shard_map_step(mesh, model):
    """The same step hand-written: each replica's real-row mask is an input; the loss is the
    masked mean over real rows, BatchNorm takes the mask, then `lax.pmean`."""
    def replica(params, stats, key, x, y, mask):
        rngs = {"dropout": jax.random.fold_in(key, lax.axis_index("r"))}

        def loss_fn(p):
            logits, new = model.apply({"params": p, "batch_stats": stats}, x, mask=mask, rngs=rngs,
                                      mutable=["batch_stats"])
            per_example = per_example_loss(logits, y)
            weights = jnp.broadcast_to(mask.reshape(mask.shape + (1,) * (per_example.ndim - 1)), per_example.shape)
            return jnp.sum(per_example * weights) / jnp.sum(weights), new.get("batch_stats", {})

        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        grads, new_stats, loss = lax.pmean((grads, new_stats, loss), "r")
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), new_stats, loss

    mapped = jax.shard_map(replica, mesh=mesh, in_specs=(P(), P(), P(), P("r"), P("r"), P("r")),
                           out_specs=(P(), P(), P()), check_vma=False)
    return jax.jit(mapped)


def padded(batch, rows):
    """A global batch laid out as strategax splits it (replica i takes rows i*per ... up to
    (i+1)*per, per = ceil(rows / R)), each replica's piece padded with zeros to per rows;
    and the real-row mask."""
    per = -(-rows // R)
    pieces, masks = [], []
    for i in range(R):
        real = [a[i * per:(i + 1) * per] for a in batch]
        n = len(real[0])
        pieces.append([np.concatenate([a, np.zeros((per - n,) + a.shape[1:], a.dtype)]) for a in real])
        masks.append(np.arange(per) < n)
    return [np.concatenate(parts) for parts in zip(*pieces)], np.concatenate(masks)


def assert_close(got, want, rtol, atol, what):
    def check(path, g, w):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol,
                                   err_msg=what + jax.tree_util.keystr(path))
    jax.tree_util.tree_map_with_path(check, tuple(got), tuple(want))


# bfloat16 compute: strategax and the hand-written step run the same bfloat16 operations, but
# may round differently where they compute one value two ways (strategax's masked sum over the
# padded batch divided by the real count against the masked mean; XLA fusing around the
# inserted masks, which may change with the JAX version). One flipped bfloat16 rounding is 2**-8
# (0.4%) of an activation and reaches a parameter only through LR * gradient. Measured with
# JAX 0.10.2: after 3 steps the two agree to 2e-9 (bit for bit for the Transformer and the
# recurrent model), while the same steps in float32 move the parameters 0.2-2% of their updates
# away (up to 1.4e-3). atol 2e-4 admits a few roundings; it does not tell bfloat16 from float32
# (the IR check at the end of the test does), and still rejects padded rows that count: the
# scan-outputs defect this test found moved a GRU bias 4.8e-4 from the hand-written step.
TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-6), "bfloat16": dict(rtol=1e-3, atol=2e-4)}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_flax_model_trains_like_hand_written_shard_map(name, dtype):
    # Intent: 3 steps (full, full, partial) of plain flax code under strategax give the
    # hand-written shard_map step's loss, parameters and batch statistics after every step.
    module, data = MODELS[name]
    model = module(dtype=jnp.dtype(dtype))
    xs, ys = data(sum(BATCHES))
    strategy = sx.MirroredStrategy(jax.devices()[:R])
    mesh = Mesh(np.array(jax.devices()[:R]), ("r",))
    sx_step, jax_step = strategax_step(strategy, model), shard_map_step(mesh, model)
    # replicated on the mesh from the start: the hand-written step compiles once
    sx_state = jax_state = jax.device_put(init(model, xs), NamedSharding(mesh, P()))
    dataset = [(xs[s:s + b], ys[s:s + b]) for s, b in zip(np.cumsum((0,) + BATCHES), BATCHES)]
    tol = TOLERANCE[dtype]
    for i, (batch, sx_batch) in enumerate(zip(dataset, strategy.experimental_distribute_dataset(dataset))):
        rows = len(batch[0])
        what = f"step {i} ({'partial' if rows % R else 'full'} batch of {rows}): "
        key = jax.random.PRNGKey(100 + i)
        *sx_state, sx_loss = sx_step(*sx_state, key, sx_batch)
        (x, y), mask = padded(batch, rows)
        *jax_state, jax_loss = jax_step(*jax_state, key, x, y, mask.astype(np.float32))
        np.testing.assert_allclose(float(sx_loss), float(jax_loss), rtol=tol["rtol"], err_msg=what + "loss")
        assert_close(sx_state, jax_state, what=what, **tol)
    assert (dtype == "bfloat16") == ("bf16[" in sx_step.ir(*sx_state, key, sx_batch))  # flax's dtype= took effect
