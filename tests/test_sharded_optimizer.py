"""sx.Optimizer(tx, shard_state=True) (ZeRO stage 1/2) on 8 replicas: 3 Adam steps (two full
batches, then a partial one) of an MLP and of a small flax Transformer (float32 and bfloat16
compute) give the parameters and every slot of the same training on one device with plain
optax, and of the unsharded sx.Optimizer; each replica holds 1/8 of every slot; the gradients
travel as reduce-scatters and the new values as all-gathers, moving an all-reduce's bytes."""
import functools

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


@functools.lru_cache(maxsize=None)
def config_runs(name, dtype):
    """The three runs of a configuration, once per process whatever order the tests run in."""
    return name, dtype, plain_optax(name, dtype), strategax_run(name, dtype, True), strategax_run(name, dtype, False)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"{c[0]}-{jnp.dtype(c[1]).name}")
def runs(request):
    return config_runs(*request.param)


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
    # Intent: per parameter a reduce-scatter (all of them fused into one bucket) and an
    # all-gather of ceil(size/8)*8 elements, together 2(N-1)/N of the padded bytes (an
    # all-reduce's); the unsharded step all-reduces.
    name, _, _, sharded, unsharded = runs
    params = by_name(name, sharded[0])
    stats = sharded[3].stats(*sharded[4])
    kinds = [c.op for c in stats.collectives]
    (bucket,) = [c for c in stats.collectives if c.op == "sx.reduce_scatter_bucket"]
    assert len(bucket.members) == kinds.count("sx.all_gather") == len(params)
    padded = sum(-(-v.size // R) * R * 4 for v in params.values())
    moved = sum(c.bytes_moved for c in stats.collectives if c.op in ("sx.reduce_scatter_bucket", "sx.all_gather"))
    assert moved == 2 * (R - 1) * padded // R
    plain = unsharded[3].stats(*unsharded[4])
    assert "sx.reduce_scatter" not in [c.op for c in plain.collectives]
    grads = sum(c.bytes_moved for c in plain.collectives if c.op.startswith("sx.all_reduce") and c.shape != ())
    assert grads <= moved <= grads + 2 * (R - 1) * 4 * len(params)  # padding: < 8 elements per parameter
    (line,) = [x for x in sharded[3].ir(*sharded[4]).splitlines() if "sx.reduce_scatter_bucket" in x]
    for k in params:  # the bucket names the variable each member serves
        assert f'"{k}"' in line.split("serves = [")[1]


PIECES = """module @m attributes {num_replicas = 4} {
  func @main(%x: f32[3,3] per_replica, %y: f32[17001] per_replica)
      -> (f32[3] per_replica, f32[3] per_replica, f32[3] per_replica, f32[4251] per_replica) {
    %s = sx.shard %x {num_replicas = 4, reason = "s"} : f32[3] per_replica
    %r = sx.reduce_scatter %x {op = "mean", num_replicas = 4, reason = "r"} : f32[3] per_replica
    %a, %b = sx.reduce_scatter_bucket %x, %y {op = "sum", num_replicas = 4, reason = "b"}
      : f32[3] per_replica, f32[4251] per_replica
    return %s, %r, %a, %b
  }
}
"""


def test_pieces_compiled_and_in_the_reference_interpreter_are_numpys():
    # Intent: sx.shard, sx.reduce_scatter and sx.reduce_scatter_bucket on 4 replicas, compiled
    # and in the reference interpreter, against NumPy: flattened, padded with zeros to a
    # multiple of 4, replica r's piece r (of its own value, of the mean, of the sums).
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(3, 3)).astype(np.float32) for _ in range(4)]
    ys = [rng.normal(size=17001).astype(np.float32) for _ in range(4)]  # over 64 KiB: alone on XLA:CPU

    def pieces(v, k):
        flat = np.concatenate([v.reshape(-1), np.zeros(4 * k - v.size, v.dtype)])
        return [flat[r * k:(r + 1) * k] for r in range(4)]
    want = [[pieces(x, 3)[r] for r, x in enumerate(xs)], pieces(np.mean(xs, 0), 3), pieces(np.sum(xs, 0), 3),
            pieces(np.sum(ys, 0), 4251)]
    module = sx.ir.parse(PIECES)
    mesh = sx.MirroredStrategy(jax.devices()[:4])._mesh
    got = sx.backends.Executable(module, mesh)(np.concatenate(xs), np.concatenate(ys))
    reference = sx.backends.run_reference(module, xs, ys, num_replicas=4)
    for g, ref, w in zip(got, reference, want):
        np.testing.assert_allclose(np.asarray(g), np.concatenate(w), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.concatenate(ref), np.concatenate(w), rtol=1e-5, atol=1e-5)


def big_step(strategy, shard_state):
    """An Adam step of a 256-2048-2048-2048-256 MLP (about 9.5 M parameters)."""
    rng = np.random.default_rng(0)
    dims = [256, 2048, 2048, 2048, 256]
    shapes = [(a, b) for a, b in zip(dims[:-1], dims[1:])] + [(b,) for b in dims[1:]]
    with strategy.scope():
        variables = [sx.Variable(rng.normal(size=s).astype(np.float32) * 0.01, name=f"p{i}")
                     for i, s in enumerate(shapes)]
        opt = sx.Optimizer(optax.adam(LR), shard_state=shard_state)

    @strategy.function
    def step(x):
        def replica(x):
            def loss(ps):
                h = x
                for w, b in zip(ps[:4], ps[4:]):
                    h = jax.nn.relu(h @ w + b)
                return jnp.sum(h ** 2)
            grads = jax.grad(loss)([v.read_value() for v in variables])
            opt.apply_gradients(zip(grads, variables))
        strategy.run(replica, args=(x,))
    x = next(iter(strategy.experimental_distribute_dataset([np.ones((16, 256), np.float32)])))
    return step, x, [int(np.prod(s)) for s in shapes]


def test_memory_of_a_10m_parameter_adam_step_holds_slots_at_one_eighth():
    # Intent: f.stats().memory counts Adam's slots at ceil(size/8) elements per device, 1/8 (+
    # padding) of the unsharded figure, splits XLA's own memory analysis of the compiled step,
    # and XLA's peak is lower than the unsharded step's.
    strategy = sx.MirroredStrategy(jax.devices()[:R])
    memory, analysis = {}, {}
    for shard_state in (False, True):
        step, x, sizes = big_step(strategy, shard_state)
        memory[shard_state] = step.stats(x).memory
        analysis[shard_state] = step.lowered(x).compile().memory_analysis()
    assert sum(sizes) > 9_000_000
    counters = 4 + 4  # Adam's count (i32, kept whole) and the optimizer's iterations
    assert memory[False].optimizer_slots == 2 * 4 * sum(sizes) + counters
    assert memory[True].optimizer_slots == 2 * 4 * sum(-(-n // R) for n in sizes) + counters
    padding = 2 * 4 * len(sizes)  # < 8 elements per parameter and slot
    assert memory[True].optimizer_slots - counters <= (memory[False].optimizer_slots - counters) / R + padding
    for s in (False, True):
        assert memory[s].inputs == analysis[s].argument_size_in_bytes
        assert memory[s].peak == analysis[s].peak_memory_in_bytes
        assert memory[s].variables == 4 * sum(sizes)
    assert analysis[True].peak_memory_in_bytes < analysis[False].peak_memory_in_bytes
