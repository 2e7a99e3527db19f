"""Collectives of a partial batch's rows inside and outside compiled functions (issue 25, item 3):
a gather along the rows concatenates the real rows; a collective that combines the replicas'
rows position by position (`all_reduce`, `reduce` without axis, a gather along another axis) is
right while every replica holds the same number of real rows, and raises a named error where
the counts differ (TensorFlow raises there too). References: NumPy on the dataset's rows."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_names_this_line, here

import strategax as sx

DATA = np.arange(13 * 2, dtype=np.float32).reshape(13, 2)
rc = sx.get_replica_context


def _batches(strategy, batch):
    """(numpy rows, distributed batch) of DATA in batches of `batch` (the last one partial)."""
    dist = strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(DATA).batch(batch))
    return [(DATA[i * batch:(i + 1) * batch], x) for i, x in enumerate(dist)]


@pytest.mark.parametrize("compiled", [False, True])
def test_gather_along_the_rows_keeps_the_real_rows(compiled):
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    gather = (lambda x: strategy.run(lambda v: rc().all_gather(v, axis=0), args=(x,))) if compiled else None
    f = strategy.function(gather) if compiled else (lambda x: strategy.gather(x, axis=0))
    means = strategy.function(lambda x: strategy.run(lambda v: jnp.mean(rc().all_gather(v, axis=0), axis=0), args=(x,)))
    for rows, x in _batches(strategy, 8):  # 2,2,2,2 rows, then 2,2,1,0
        got = f(x)
        for part in (strategy.experimental_local_results(got) if compiled else [got]):
            np.testing.assert_array_equal(np.asarray(part), rows)
        for part in strategy.experimental_local_results(means(x)):
            np.testing.assert_allclose(np.asarray(part), rows.mean(axis=0), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_gather_along_another_axis_with_even_counts_drops_the_padded_rows(compiled):
    # the last batch holds one real row of two on every replica: before, the eager gather along
    # axis 1 returned the padded row too (a silent wrong answer)
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    data = np.arange(12 * 2, dtype=np.float32).reshape(12, 2)
    dist = strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(data).batch(8))
    f = strategy.function(lambda x: strategy.gather(x, axis=1)) if compiled else (lambda x: strategy.gather(x, axis=1))
    for i, x in enumerate(dist):
        rows = data[i * 8:(i + 1) * 8]
        per_replica = np.split(rows, 4) if i == 0 else [rows[k:k + 1] for k in range(4)]
        np.testing.assert_array_equal(np.asarray(f(x)), np.concatenate(per_replica, axis=1))


def test_all_reduce_of_rows_runs_for_even_counts_and_raises_for_uneven_ones():
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    line = here() + 1
    f = strategy.function(lambda x: strategy.run(lambda v: rc().all_reduce("SUM", v), args=(x,)))
    even = np.arange(12 * 2, dtype=np.float32).reshape(12, 2)  # the last batch: one real row per replica
    dist = strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(even).batch(8))
    for i, x in enumerate(dist):
        pieces = np.split(even[i * 8:(i + 1) * 8], 4)
        for part in strategy.experimental_local_results(f(x)):
            np.testing.assert_array_equal(np.asarray(part), sum(pieces))
    (_, full), (_, partial) = _batches(strategy, 8)  # the partial one: 2, 2, 1, 0 real rows
    f(full)
    with pytest.raises(ValueError) as e:
        f(partial)
    assert_names_this_line(e, line)
    assert "entry by entry along axis 0" in str(e.value) and "fix:" in str(e.value)


def test_gradient_through_a_gather_of_rows_raises_rather_than_guess():
    # the gradient of an all_gather slices this replica's piece from the summed cotangent: of
    # real rows concatenated that slice is not this replica's rows, so the call raises
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    w = jnp.array([1.0, -2.0])

    def step(v):
        return jax.grad(lambda w: jnp.sum(rc().all_gather(v @ w, axis=0) ** 2))(w)
    f = strategy.function(lambda x: strategy.run(step, args=(x,)))
    (rows, full), (_, partial) = _batches(strategy, 8)
    total = sum(np.asarray(g) for g in strategy.experimental_local_results(f(full)))
    np.testing.assert_allclose(total, 4 * (2 * (rows @ np.asarray(w))) @ rows, rtol=1e-6)  # JAX's rule: N x
    with pytest.raises(ValueError) as e:
        f(partial)
    assert "partial" in str(e.value) and "jax.dynamic_slice" in str(e.value)


def test_mean_of_an_empty_replica_with_one_padded_row_is_nan():
    # one row per replica, the last batch leaves replica 3 empty: its jnp.mean is of nothing (NaN in
    # one-device JAX), not the padded row's 0 (the `sum / 1` of a mean over one row used to be folded)
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(4)])
    data = np.arange(7, dtype=np.float32) + 1
    dist = strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(data).batch(4))
    f = strategy.function(lambda x: strategy.run(jnp.mean, args=(x,)))
    for i, x in enumerate(dist):
        pieces = [data[4 * i + k:4 * i + k + 1] for k in range(4)]
        want = [float(jnp.mean(jnp.asarray(p))) for p in pieces]  # plain JAX, one device
        got = [float(v) for v in strategy.experimental_local_results(f(x))]
        np.testing.assert_array_equal(got, want)
