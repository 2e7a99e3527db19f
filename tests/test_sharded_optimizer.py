"""sx.Optimizer(tx, shard_state=True) (ZeRO stage 1/2) on 8 replicas: 3 Adam steps (two full
batches, then a partial one) of an MLP and of a small flax Transformer (float32 and bfloat16
compute) give the parameters and every slot of the same training on one device with plain
optax, and of the unsharded sx.Optimizer; each replica holds 1/8 of every slot; the gradients
travel as reduce-scatters and the new values as all-gathers, moving an all-reduce's bytes."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import strategax as sx

R = 8
BATCHES = (16, 16, 13)  # the last: 2 rows on replicas 0-5, 1 on replica 6, none on replica 7
LR = 1e-2


def mlp_params():
    rng = np.random.default_rng(0)
    # sizes that 8 does not divide (padded pieces) and one it does
    return {"w1": rng.normal(size=(5, 13)).astype(np.float32) * 0.4, "b1": np.zeros(13, np.float32),
            "w2": rng.normal(size=(13, 3)).astype(np.float32) * 0.3, "b2": np.full(3, 0.1, np.float32),
            "w3": rng.normal(size=(3, 8)).astype(np.float32) * 0.3}


def mlp_loss(params, x, y, dtype):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    h = jax.nn.relu(h @ params["w2"] + params["b2"]) @ params["w3"]
    return jnp.sum((h[:, :2] - y) ** 2, axis=-1)  # per example


def mlp_data(n):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 2)).astype(np.float32)


VOCAB = 11


class Transformer(nn.Module):
    """Embed, pre-norm self-attention under a causal and padding mask, an MLP, tied logits."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(VOCAB, 8, dtype=self.dtype)
        real = tokens > 0
        mask = nn.combine_masks(nn.make_causal_mask(tokens), nn.make_attention_mask(real, real))
        h = embed(tokens)
        # no bias on the attention: a key bias has a zero gradient, which Adam would amplify from noise
        attention = nn.MultiHeadDotProductAttention(2, use_bias=False, dtype=self.dtype)
        h = h + attention(nn.LayerNorm(dtype=self.dtype)(h), mask=mask)
        h = h + nn.Dense(8, dtype=self.dtype)(nn.gelu(nn.Dense(12, dtype=self.dtype)(h)))
        return embed.attend(nn.LayerNorm(dtype=self.dtype)(h))


def transformer_params():
    """Parameters of the shapes flax makes, drawn with NumPy (compiling flax's initializers
    would cost more than the steps): kernels and embeddings N(0, 1/fan-in), biases N(0, 0.1^2),
    scales 1 + N(0, 0.1^2)."""
    shapes = jax.eval_shape(lambda: Transformer().init(jax.random.key(0), np.ones((2, 6), np.int32)))["params"]
    rng = np.random.default_rng(0)

    def draw(path, s):
        noise = rng.normal(size=s.shape).astype(np.float32)
        fixed = {"bias": 0.1 * noise, "scale": 1 + 0.1 * noise}
        return fixed.get(path[-1].key, noise / np.sqrt(np.prod(s.shape[:-1])))
    return jax.tree_util.tree_map_with_path(draw, shapes)


def transformer_loss(params, x, y, dtype):
    logits = Transformer(dtype=dtype).apply({"params": params}, x)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return jnp.sum(-jnp.take_along_axis(logp, y[..., None], axis=-1)[..., 0], axis=-1)  # per sequence


def token_data(n):
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, VOCAB, size=(n, 6)).astype(np.int32)
    tokens[np.arange(6) >= 6 - rng.integers(0, 3, size=(n, 1))] = 0
    return tokens, rng.integers(0, VOCAB, size=(n, 6)).astype(np.int32)


MODELS = {"mlp": (mlp_params, mlp_loss, mlp_data), "transformer": (transformer_params, transformer_loss, token_data)}


def dataset(data):
    xs, ys = data(sum(BATCHES))
    starts = np.cumsum((0,) + BATCHES)
    return [(xs[s:s + b], ys[s:s + b]) for s, b in zip(starts, BATCHES)]


def plain_optax(name, dtype):
    """One device, plain JAX + optax: the parameters and Adam's state after the 3 steps."""
    init, loss, data = MODELS[name]
    params, tx = init(), optax.adam(LR)
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(lambda p: jnp.mean(loss(p, x, y, dtype)))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for x, y in dataset(data):
        params, state = step(params, state, x, y)
    adam = state[0]
    return params, {"mu": adam.mu, "nu": adam.nu, "count": adam.count}


def strategax_run(name, dtype, shard_state, strategy=None):
    """The same 3 steps under MirroredStrategy with sx.Optimizer; the loss is each replica's
    share of the global batch's mean (padded rows masked by the compiler). Returns parameters,
    slots by (optax path, parameter path), the optimizer, the step and its last arguments."""
    init, loss, data = MODELS[name]
    strategy = strategy or sx.MirroredStrategy(jax.devices()[:R])
    flat, tree = jax.tree_util.tree_flatten_with_path(init())
    names = [jax.tree_util.keystr(p) for p, _ in flat]
    with strategy.scope():
        variables = [sx.Variable(v, name=n) for n, (_, v) in zip(names, flat)]
        opt = sx.Optimizer(optax.adam(LR), shard_state=shard_state)

    @strategy.function
    def step(x, y, rows):
        def replica(x, y):
            def loss_fn(values):
                return jnp.sum(loss(jax.tree_util.tree_unflatten(tree, values), x, y, dtype)) / rows
            grads = jax.grad(loss_fn)([v.read_value() for v in variables])
            opt.apply_gradients(zip(grads, variables))
        strategy.run(replica, args=(x, y))

    args = None
    for batch, (x, y) in zip(dataset(data), strategy.experimental_distribute_dataset(dataset(data))):
        args = (x, y, jnp.float32(len(batch[0])))
        step(*args)
    params = jax.tree_util.tree_unflatten(tree, [v.numpy() for v in variables])
    slots = {(path[-1], v.name): s.numpy() for v, path, s in opt.slot_variables()}
    return params, slots, opt, step, args


def by_name(name, tree):
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}


CONFIGS = [("mlp", jnp.float32), ("transformer", jnp.float32), ("transformer", jnp.bfloat16)]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{jnp.dtype(c[1]).name}")
def runs(request):
    name, dtype = request.param
    return name, dtype, plain_optax(name, dtype), strategax_run(name, dtype, True), strategax_run(name, dtype, False)


def test_three_adam_steps_equal_unsharded_and_plain_optax(runs):
    # Intent: parameters and every slot (mu, nu, count) after 3 steps, partial last batch
    # included: sharded equals unsharded to 1e-6 and both equal one-device optax.
    name, dtype, (want_params, want_state), sharded, unsharded = runs
    f32 = dtype == jnp.float32
    for run in (sharded, unsharded):
        params, slots = run[0], run[1]
        # against one-device optax: the same maths, the gradient summed in another order
        ref_tol = dict(rtol=1e-5, atol=1e-6) if f32 else dict(rtol=2e-2, atol=2e-3)
        for k, v in by_name(name, params).items():
            np.testing.assert_allclose(v, by_name(name, want_params)[k], err_msg=k, **ref_tol)
        for slot in ("mu", "nu"):
            for k, v in by_name(name, want_state[slot]).items():
                np.testing.assert_allclose(slots[(slot, k)], v, err_msg=f"{slot} {k}", **ref_tol)
        assert all(int(slots[("count", k)]) == 3 for k in by_name(name, params))
    for k, v in by_name(name, sharded[0]).items():
        np.testing.assert_allclose(v, by_name(name, unsharded[0])[k], rtol=0, atol=1e-6, err_msg=k)
    assert set(sharded[1]) == set(unsharded[1])
    for key, v in sharded[1].items():
        np.testing.assert_allclose(v, unsharded[1][key], rtol=0, atol=1e-6, err_msg=str(key))


def test_each_replica_holds_one_eighth_of_each_slot(runs):
    # Intent: every slot shaped like its parameter is a piece of ceil(size / 8) per replica;
    # the whole value (numpy) has the parameter's shape; Adam's count is kept whole.
    name, _, _, sharded, _ = runs
    opt = sharded[2]
    assert opt.shard_state
    for var, path, slot in opt.slot_variables():
        if path[-1] == "count":
            assert not isinstance(slot, sx.SyncOnReadVariable) and slot.shape == ()
            continue
        size = int(np.prod(var.shape))
        assert slot.shape == var.shape and slot.numpy().shape == var.shape
        assert [c.shape for c in slot.values] == [(-(-size // R),)] * R


def test_collectives_move_an_all_reduce_worth_of_bytes(runs):
    # Intent: per parameter one reduce-scatter and one all-gather of ceil(size/8)*8 elements,
    # together 2(N-1)/N of the padded bytes (an all-reduce's); the unsharded step all-reduces.
    name, _, _, sharded, unsharded = runs
    params = by_name(name, sharded[0])
    stats = sharded[3].stats(*sharded[4])
    kinds = [c.op for c in stats.collectives]
    assert kinds.count("sx.reduce_scatter") == kinds.count("sx.all_gather") == len(params)
    padded = sum(-(-v.size // R) * R * 4 for v in params.values())
    moved = sum(c.bytes_moved for c in stats.collectives if c.op in ("sx.reduce_scatter", "sx.all_gather"))
    assert moved == 2 * (R - 1) * padded // R
    plain = unsharded[3].stats(*unsharded[4])
    assert "sx.reduce_scatter" not in [c.op for c in plain.collectives]
    grads = sum(c.bytes_moved for c in plain.collectives if c.op.startswith("sx.all_reduce") and c.shape != ())
    assert grads <= moved <= grads + 2 * (R - 1) * 4 * len(params)  # padding: < 8 elements per parameter
    ir = sharded[3].ir(*sharded[4])
    for k in params:  # each reduce-scatter names the variable it serves
        assert f'serves = "{k}"' in ir
