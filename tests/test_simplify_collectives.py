"""simplify-collectives, cse and canonicalize on real programs: fewer collectives, same numbers
as plain one-device NumPy/JAX."""
import numpy as np

import strategax as sx


def per_replica(strategy, pieces):
    return strategy.experimental_distribute_values_from_function(lambda c: pieces[c.replica_id_in_sync_group])


def test_gather_then_sum_becomes_one_all_reduce_of_partial_sums():
    # Intent: jnp.sum(all_gather(x), 0) sends each replica's partial sum, not its piece.
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    pieces = [np.arange(6, dtype=np.float32).reshape(2, 3) + r for r in range(n)]

    def fn(x):
        return sx.get_replica_context().all_gather(x, 0).sum(0)

    step = strategy.function(lambda x: strategy.run(fn, args=(x,)))
    x = per_replica(strategy, pieces)
    out = step(x)
    np.testing.assert_allclose(np.asarray(out.values[0]), np.concatenate(pieces).sum(0))
    final = step.ir(x)
    assert "sx.all_gather" not in final and final.count("sx.all_reduce") == 1
    (c,) = step.stats(x).collectives
    assert c.payload_bytes == 3 * 4  # f32[3] instead of the gathered f32[2n,3]


def test_reductions_of_mirrored_values_need_no_communication():
    # Intent: MEAN of a mirrored value is the value, SUM is N times it; duplicates of one
    # all_reduce merge; none of this changes the numbers.
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    pieces = [np.full((3,), r, np.float32) for r in range(n)]
    w = np.array([1.0, 2.0, 3.0], np.float32)

    def fn(x, w):
        ctx = sx.get_replica_context()
        mean_w = ctx.all_reduce("MEAN", w)
        sum_w = ctx.all_reduce("SUM", w)
        a = ctx.all_reduce("SUM", x * 2.0)
        b = ctx.all_reduce("SUM", x * 2.0)  # the same value, reduced twice
        return mean_w + sum_w + a + b

    step = strategy.function(lambda x, w: strategy.run(fn, args=(x, w)))
    x = per_replica(strategy, pieces)
    out = step(x, w)
    total = 2.0 * sum(pieces)
    np.testing.assert_allclose(np.asarray(out.values[0]), w + n * w + 2 * total, rtol=1e-6)
    assert step.stats(x, w).count == 1  # only x*2 is communicated, once
    assert step.ir(x, w, stage="traced").count("sx.all_reduce") == 4


def test_transposed_gradient_is_reduced_before_its_transpose():
    # Intent: jax.grad of x @ w is transpose(dot_general(ct, x)); its all_reduce runs before
    # the transpose (issue 34: XLA:CPU otherwise folds the transpose into the dot and leaves it
    # to its generic emitter); the numbers are the mean of the replicas' gradients (NumPy).
    import jax
    import jax.numpy as jnp
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    pieces = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(n)]
    w = rng.standard_normal((3, 4)).astype(np.float32)

    def fn(x, w):
        g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
        ctx = sx.get_replica_context()
        y = jnp.transpose(jnp.transpose(x.reshape(5, 3, 1) * w[:, :2], (1, 0, 2)), (2, 1, 0))
        return ctx.all_reduce("MEAN", g), ctx.all_reduce("SUM", y)  # y: two transposes, composed

    step = strategy.function(lambda x, w: strategy.run(fn, args=(x, w)))
    x = per_replica(strategy, pieces)
    out, summed = (np.asarray(v.values[0]) for v in step(x, w))
    expected = np.mean([p.T @ (1 - np.tanh(p @ w) ** 2) for p in pieces], axis=0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    y = sum((p.reshape(5, 3, 1) * w[:, :2]).transpose(1, 0, 2).transpose(2, 1, 0) for p in pieces)
    np.testing.assert_allclose(summed, y, rtol=1e-5, atol=1e-5)
    final = step.ir(x, w)
    reduced = final.index("sx.all_reduce")
    assert final.count("jax.transpose") == 2 and final.index("jax.transpose") > reduced, final
    assert "f32[4,3] mirrored" in final[reduced:].splitlines()[0]  # the dot's own result
