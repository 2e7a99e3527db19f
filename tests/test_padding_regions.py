"""Rows followed through control flow (issue 24 items 2 and 4): an RNN's batch rows in a
`lax.scan` carry, rows through `while_loop`, `cond`, `remat` and `custom_vjp`, on 8 replicas
from a distributed dataset with a partial last batch; each replica's gradient equals
one-device JAX on its real rows. Where the analysis cannot follow the rows, full batches
run (checked against JAX) and only a call with a partial batch raises, naming the op's line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

H = 4


def params():
    k1, k2, k3 = jax.random.split(jax.random.key(7), 3)
    return {"wx": jax.random.normal(k1, (3, H)) * 0.5, "wh": jax.random.normal(k2, (H, H)) * 0.5,
            "out": jax.random.normal(k3, (H, 2)) * 0.5}


def rnn_loss(p, x, y):
    """A tanh RNN over time (x: [B, T, 3]), the batch rows in the carry; mean cross-entropy."""
    def cell(h, xt):
        h = jnp.tanh(xt @ p["wx"] + h @ p["wh"])
        return h, h
    h, hs = jax.lax.scan(cell, jnp.zeros((x.shape[0], H)), jnp.swapaxes(x, 0, 1))
    logits = h @ p["out"] + 0.1 * jnp.mean(hs, axis=0) @ p["out"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def branch_loss(p, x, y):
    """Rows through a cond and a remat (differentiated)."""
    step = jax.checkpoint(lambda h: jnp.tanh(h @ p["wh"]) + h)
    h = step(jnp.tanh(x[:, 0, :] @ p["wx"]))
    h = jax.lax.cond(jnp.sum(p["wh"]) > 0, lambda h: h * 2.0, lambda h: h - 1.0, h)
    logits = h @ p["out"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def while_stats(p, x, y):
    """Rows through a while_loop (refinement steps until a mirrored condition): the mean and
    per-example outputs of its result (a while_loop has no reverse-mode derivative)."""
    def body(c):
        k, h = c
        return k + 1, jnp.tanh(h @ p["wh"]) + h
    _, h = jax.lax.while_loop(lambda c: c[0] < 3, body, (0, jnp.tanh(x[:, 0, :] @ p["wx"])))
    return {"mean": jnp.mean(h), "var": jnp.var(h, axis=0), "max": jnp.max(h), "count": jnp.sum(y >= 0)}


def scan_outputs(p, x, y):
    """Rows through a scan's stacked outputs (ys: [T, B, H], the rows on axis 1 outside the
    loop, axis 0 inside), reduced over the rows after the loop: their mean and a second RNN
    stacked on them, differentiated (its backward loop sums over the rows of the first's ys)."""
    def cell(w):
        def step(h, xt):
            h = jnp.tanh(xt @ w + h @ p["wh"])
            return h, h
        return step
    _, hs = jax.lax.scan(cell(p["wx"]), jnp.zeros((x.shape[0], H)), jnp.swapaxes(x, 0, 1))

    def second(wh):
        _, out = jax.lax.scan(cell(wh), jnp.zeros((x.shape[0], H)), hs)
        return jnp.mean(out ** 2)
    return {"mean": jnp.mean(hs), "rows_mean": jnp.mean(hs, axis=1), "grad": jax.grad(second)(p["wh"]),
            "count": jnp.sum(y >= 0)}


def grads_of(loss):
    return lambda p, x, y: jax.grad(loss)(p, x, y)


def data(n):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 5, 3)).astype(np.float32), rng.integers(0, 2, size=(n,)).astype(np.int32))


def _per_replica(fn, n=2 * 16 + 11):
    """Each replica's `fn(params, x, y)` over a dataset with a partial last batch, checked
    against `fn` on that replica's real rows in plain JAX; returns the last batch."""
    strategy = sx.MirroredStrategy()
    p = params()

    @strategy.function
    def grads(batch):
        return strategy.run(lambda x, y: fn(p, x, y), args=batch)

    dataset = sx.data.Dataset.from_tensor_slices(data(n)).batch(16)
    reference = jax.jit(fn)  # plain JAX, one program per row count (run eagerly, every loop compiles)
    for batch in strategy.experimental_distribute_dataset(dataset):
        got = strategy.experimental_local_results(grads(batch))
        xs, ys = (strategy.experimental_local_results(t) for t in batch)
        for g, x, y in zip(got, xs, ys):
            if len(x) == 0:
                continue  # a replica with no rows: TensorFlow's mean over no rows is not defined
            want = reference(p, np.asarray(x), np.asarray(y))  # on the default device: one program
            for k in want:
                np.testing.assert_allclose(g[k], want[k], rtol=1e-5, atol=1e-6)
    return batch


@pytest.mark.parametrize("fn", [grads_of(rnn_loss), scan_outputs, grads_of(branch_loss), while_stats],
                         ids=["scan_rnn_grads", "scan_outputs", "cond_remat_grads", "while_stats"])
def test_rows_through_control_flow_match_one_device_jax(fn):
    # Intent: the last batch (11 rows over 8 replicas) is partial; every replica's result is
    # plain JAX's on its real rows, so padded rows reached no sum inside or outside the loops.
    last = _per_replica(fn)
    assert min(last[0].real_counts) < last[0].padded_rows  # the partial batch was among those checked


def test_custom_vjp_follows_rows():
    # Intent: a custom_vjp's forward and backward (inlined as the user's code) are followed too.
    @jax.custom_vjp
    def scale(x):
        return x * 2.0

    scale.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g * 2.0,))

    def loss(p, x, y):
        return jnp.mean(scale(x[:, 0, :] @ p["wx"]) ** 2) + 0.0 * jnp.sum(y)

    _per_replica(grads_of(loss))


def test_a_gap_runs_full_batches_and_raises_for_a_partial_one():
    # Intent: cumsum over the flattened rows is a place the analysis cannot follow rows; a full
    # batch has no padded rows and gives plain JAX's numbers; the partial batch raises at that
    # call (not at trace time), naming the user's line and the fix, and consumes no batch.
    strategy = sx.MirroredStrategy()
    x = np.arange((16 + 5) * 3, dtype=np.float32).reshape(-1, 3)  # 16 rows, then 5 (partial)

    def replica(x):
        return jnp.sum(jnp.cumsum(x.reshape(-1)))  # the rows are flattened here

    line = here() - 2
    step = strategy.function(lambda b: strategy.run(replica, args=(b,)))
    iterator = iter(strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(x).batch(16)))
    full = next(iterator)
    got = [float(v) for v in strategy.experimental_local_results(step(full))]
    want = [float(jnp.sum(jnp.cumsum(jnp.asarray(v).reshape(-1)))) for v in strategy.experimental_local_results(full)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "padding_gaps" in step.ir(full) and "jax.reshape" in step.ir(full)
    partial = next(iterator)
    with pytest.raises(sx.DistributionValueError) as err:
        step(partial)
    assert_names_this_line(err, line)
    assert "partial" in str(err.value) and "drop_remainder=True" in str(err.value)


def test_a_gap_inside_the_function_raises_for_a_partial_batch_taken_by_next():
    # Intent: the same gap with the batch taken by next(iterator) inside the function: full
    # batches run, the call that takes the partial one raises and puts it back.
    strategy = sx.MirroredStrategy()
    x = np.ones((16 + 5, 3), np.float32)

    @strategy.function
    def step(iterator):
        return strategy.run(lambda v: jnp.sum(jnp.cumsum(v.reshape(-1))), args=(next(iterator),))

    iterator = iter(strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(x).batch(16)))
    out = strategy.experimental_local_results(step(iterator))
    np.testing.assert_allclose([float(v) for v in out], [float(jnp.sum(jnp.cumsum(jnp.ones(6))))] * 8)
    with pytest.raises(sx.DistributionValueError, match="partial"):
        step(iterator)
    with pytest.raises(sx.DistributionValueError, match="partial"):
        step(iterator)  # the partial batch was put back: the same call fails the same way


def test_a_divisor_the_pass_cannot_evaluate_in_a_loop_is_never_guessed():
    # Intent: inside `for x in dataset` a row sum divided by a loop carry (made from constants,
    # a different number each step) may or may not be the padded row count: full batches give
    # plain JAX's numbers, a loop meeting the partial batch raises naming the division's line.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    x = np.arange(21, dtype=np.float32)

    def replica(v, s):
        return jnp.sum(v) / s
    line = here() - 1

    @strategy.function
    def epoch(dataset):
        total, scale = jnp.zeros(()), jnp.ones(())
        for b in dataset:
            total += strategy.reduce("SUM", strategy.run(replica, args=(b, scale)), axis=None)
            scale = scale * 2.0
        return total

    full = strategy.experimental_distribute_dataset([x[:8], x[8:16]])
    np.testing.assert_allclose(float(epoch(full)), np.sum(x[:8]) + np.sum(x[8:16]) / 2, rtol=1e-6)
    partial = strategy.experimental_distribute_dataset([x[:8], x[8:16], x[16:]])
    with pytest.raises(sx.DistributionValueError, match="cannot evaluate") as err:
        epoch(partial)
    assert_names_this_line(err, line)
