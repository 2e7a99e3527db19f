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


def test_transposed_gradient_is_reduced_before_its_transpose_where_xla_runs_a_matmul():
    # Intent: jax.grad of x @ w is transpose(dot_general(ct, x)). With x of rank 3 (a sequence
    # model's Dense layer) XLA makes that dot a [M,K]x[K,N] product and YNNPACK runs it only if
    # the transpose comes after the all_reduce (issue 34); with x of rank 2 (an MLP's) XLA runs
    # the dot in its generic emitter in either order and a transpose after the all_reduce would
    # only cost a copy (issue 36), so it stays. Numbers: the mean / sum of the replicas'
    # gradients (NumPy).
    import re

    import jax
    import jax.numpy as jnp
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    pieces = [rng.standard_normal((2, 5, 3)).astype(np.float32) for _ in range(n)]
    w = rng.standard_normal((3, 4)).astype(np.float32)

    def fn(x, w):
        ctx = sx.get_replica_context()
        g3 = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
        g2 = jax.grad(lambda w: jnp.sum(jnp.tanh(x.reshape(10, 3) @ w)))(w)
        return ctx.all_reduce("MEAN", g3), ctx.all_reduce("SUM", g2)

    step = strategy.function(lambda x, w: strategy.run(fn, args=(x, w)))
    x = per_replica(strategy, pieces)
    mean3, sum2 = (np.asarray(v.values[0]) for v in step(x, w))
    grads = [p.reshape(10, 3).T @ (1 - np.tanh(p.reshape(10, 3) @ w) ** 2) for p in pieces]
    np.testing.assert_allclose(mean3, np.mean(grads, axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sum2, np.sum(grads, axis=0), rtol=1e-5, atol=1e-5)
    reduced = [line for line in step.ir(x, w).splitlines() if "sx.all_reduce" in line]
    assert len(reduced) == 2, reduced
    mean_line, = (line for line in reduced if '"mean"' in line)
    sum_line, = (line for line in reduced if '"sum"' in line)
    assert ": f32[4,3] mirrored" in mean_line, mean_line  # the dot's own [out, in] result
    assert ": f32[3,4] mirrored" in sum_line, sum_line  # the transposed gradient, as traced
    # What XLA:CPU made of it: both weight gradients' dots (rank 3: YNNPACK, rank 2: generic)
    # with no transposed copy of the rank-2 one after its all-reduce.
    hlo = step.hlo(x, w)
    entry = hlo[hlo.index("\nENTRY"):]
    assert len(re.findall(r"= f32\[3,4\]\{1,0\} dot\(", entry)) == 1, entry  # rank 2, generic, [in, out]
    assert not re.search(r"= f32\[4,3\]\S* dot\(", entry), entry  # rank 3 in a YNNPACK fusion
