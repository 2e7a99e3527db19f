"""Gradients inside a replica function: no implicit collectives, explicit ones exactly."""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx

N = 4


def setup():
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])
    xs = [np.full((3,), i + 1.0, np.float32) for i in range(N)]
    x = strategy.experimental_distribute_values_from_function(lambda ctx: xs[ctx.replica_id_in_sync_group])
    w = jnp.array([0.5, -1.0, 2.0], jnp.float32)
    return strategy, x, w, xs


def loss(w, x):
    return jnp.sum(jnp.sin(w * x) * x)


ref_grad = jax.jit(jax.grad(loss))  # the one-device plain-JAX reference


def count_all_reduces(text: str) -> int:
    return text.count("all-reduce(") + text.count("all-reduce-start(")


def test_grad_of_mirrored_input_is_each_replicas_own():
    # Intent: jax.grad w.r.t. a mirrored value, returned without all_reduce, is replica i's own
    # gradient (JAX's shard_map would silently psum it; strategax must not).
    strategy, x, w, xs = setup()
    step = strategy.function(lambda w, x: strategy.run(jax.grad(loss), args=(w, x)))
    grads = strategy.experimental_local_results(step(w, x))
    for g, xi in zip(grads, xs):
        np.testing.assert_allclose(g, ref_grad(w, xi), rtol=2e-5)
    assert "sx.all_reduce" not in step.ir(w, x)
    assert count_all_reduces(step.hlo(w, x)) == 0
    assert "all_reduce" not in step.stablehlo(w, x)


def test_grad_with_one_all_reduce_sum():
    # Intent: one explicit all_reduce(SUM) gives the summed gradient on every replica and
    # exactly one all-reduce in the lowered and the compiled program.
    strategy, x, w, xs = setup()

    def replica_fn(w, x):
        g = jax.grad(loss)(w, x)
        return sx.get_replica_context().all_reduce(sx.ReduceOp.SUM, g)

    step = strategy.function(lambda w, x: strategy.run(replica_fn, args=(w, x)))
    out = step(w, x)
    assert isinstance(out, sx.Mirrored)
    expect = sum(ref_grad(w, xi) for xi in xs)
    for g in strategy.experimental_local_results(out):
        np.testing.assert_allclose(g, expect, rtol=1e-5)
    assert step.ir(w, x).count("sx.all_reduce") == 1
    assert step.stablehlo(w, x).count("stablehlo.all_reduce") == 1
    assert count_all_reduces(step.hlo(w, x)) == 1
    stats = step.stats(w, x)
    assert stats.count == 1 and stats.bytes_per_replica == 2 * 12 * (N - 1) // N


def test_gradient_through_all_reduce_is_all_reduce_of_gradient():
    # Intent: TensorFlow's rule: d/dx of all_reduce(SUM, f(x)) flows back through an
    # all_reduce(SUM) of the cotangent; with loss = sum_r all_reduce(x_r^2) on each replica,
    # each replica's gradient is N * 2 x_r.
    strategy, x, w, xs = setup()

    def replica_fn(x):
        ctx = sx.get_replica_context()
        return jax.grad(lambda v: jnp.sum(ctx.all_reduce("sum", v * v)))(x)

    out = strategy.run(replica_fn, args=(x,))
    for g, xi in zip(strategy.experimental_local_results(out), xs):
        np.testing.assert_allclose(g, N * 2 * xi, rtol=2e-5)


def test_all_gather_in_replica_context_and_its_gradient():
    # Intent: all_gather concatenates along the axis; its gradient gives each replica the
    # summed cotangent of its own piece.
    strategy, x, w, xs = setup()

    def replica_fn(x):
        ctx = sx.get_replica_context()
        gathered = ctx.all_gather(x, axis=0)
        weights = jnp.arange(gathered.shape[0], dtype=jnp.float32)
        grad = jax.grad(lambda v: jnp.sum(ctx.all_gather(v, axis=0) * weights))(x)
        return gathered, grad

    gathered, grad = strategy.run(replica_fn, args=(x,))
    for g in strategy.experimental_local_results(gathered):
        np.testing.assert_array_equal(g, np.concatenate(xs))
    for i, g in enumerate(strategy.experimental_local_results(grad)):
        np.testing.assert_allclose(g, N * np.arange(3 * i, 3 * i + 3), rtol=2e-5)


def test_all_reduce_mean_of_pytree():
    # Intent: all_reduce accepts pytrees; MEAN averages each leaf.
    strategy, x, w, xs = setup()
    out = strategy.run(lambda x: sx.get_replica_context().all_reduce(
        "mean", {"a": x, "b": (x * 2,)}), args=(x,))
    mean = np.mean(xs, axis=0)
    for r in strategy.experimental_local_results(out):
        np.testing.assert_allclose(r["a"], mean, rtol=2e-5)
        np.testing.assert_allclose(r["b"][0], 2 * mean, rtol=2e-5)


RECORDED_GRADIENTS = json.loads((pathlib.Path(__file__).parent / "data/tf/gradients.json").read_text())["scenarios"]


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("compiled", [False, True])
def test_gradient_through_all_reduce_is_tensorflows(op, n, compiled):
    # d/dw of all_reduce(op, x_r * w) on replica r: the all-reduce of the cotangents (SUM: N * x_r),
    # recorded from TensorFlow 2.21 (tools/tf_record/record_gradients.py)
    rec = RECORDED_GRADIENTS[f"all_reduce_{op.lower()}_{'tf_function' if compiled else 'eager'}_r{n}"]["result"]
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])
    x = strategy.experimental_distribute_values_from_function(lambda ctx: jnp.float32(ctx.replica_id_in_sync_group + 1))

    def run(x):
        return strategy.run(lambda x: jax.grad(lambda w: sx.get_replica_context().all_reduce(op, x * w))(2.0),
                            args=(x,))
    got = (strategy.function(run) if compiled else run)(x)
    assert [float(g) for g in strategy.experimental_local_results(got)] == [c["value"] for c in rec["values"]]
