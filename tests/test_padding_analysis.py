"""Partial batches in plain JAX code (issue 13): the mask-padding pass follows the padded row
axis, so sums, means, contractions and their gradients count only real rows, and only
per-example outputs are trimmed. References: one-device plain JAX / NumPy on the real rows,
and TensorFlow's documented `[5.5, 7.0]`."""
import json
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

GLOBAL_BATCH, LR = 16, 0.5


def init():
    k1, k2, k3, k4 = jax.random.split(jax.random.key(1), 4)
    return {"w1": jax.random.normal(k1, (5, 8)) * 0.5, "b1": 0.3 + 0.1 * jax.random.normal(k2, (8,)),
            "w2": jax.random.normal(k3, (8, 4)) * 0.5, "b2": -0.2 + 0.1 * jax.random.normal(k4, (4,))}


def ce_loss(p, x, y):
    """TensorFlow's recipe: log-softmax cross-entropy summed, over the global batch size."""
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logp = jax.nn.log_softmax(h @ p["w2"] + p["b2"])
    return -jnp.sum(jnp.take_along_axis(logp, y[:, None], axis=1)) / GLOBAL_BATCH


def ratio_loss(p, x, y):
    """Per-example loss divided by a feature: inf/NaN on a padded (all-zero) row."""
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    return jnp.sum(jnp.sum(out ** 2, axis=1) / jnp.sum(x ** 2, axis=1)) / GLOBAL_BATCH + 0.0 * y.sum()


def data(n=9 * GLOBAL_BATCH + 13):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 5)).astype(np.float32) + 0.5
    y = rng.integers(0, 4, size=n).astype(np.int32)
    return [(x[i:i + GLOBAL_BATCH], y[i:i + GLOBAL_BATCH]) for i in range(0, n, GLOBAL_BATCH)]


def train(loss_fn, batches):
    strategy = sx.MirroredStrategy()
    traces = []

    @strategy.function
    def step(params, batch):
        def replica_step(params, batch):
            traces.append(1)
            grads = jax.grad(loss_fn)(params, *batch)
            grads = sx.get_replica_context().all_reduce("sum", grads)
            return jax.tree.map(lambda p, g: p - LR * g, params, grads)
        return strategy.run(replica_step, args=(params, batch))

    @jax.jit
    def reference_step(params, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads)

    params = ref = init()
    dist = list(strategy.experimental_distribute_dataset(batches))
    counts = [len(v) for v in dist[-1][0].values]
    for batch, (bx, by) in zip(dist, batches, strict=True):
        params = step(params, batch)
        ref = reference_step(ref, bx, by)
    params = jax.tree.map(lambda v: np.asarray(v.values[0]) if hasattr(v, "values") else np.asarray(v), params)
    return params, ref, counts, len(traces), len(step._cache)


def test_mlp_with_partial_last_batch_trains_like_one_device_jax():
    # Intent: 10 batches, the last of 13 rows (2,2,2,2,2,2,1,0 on 8 replicas), a 2-layer relu MLP
    # with non-zero biases and TF's sum/GLOBAL_BATCH cross-entropy: the padded rows (whose hidden
    # activations are relu(b1) != 0) count for nothing, with one trace and one executable.
    batches = data()
    assert len(batches) == 10 and len(batches[-1][0]) == 13
    params, ref, counts, traces, compiled = train(ce_loss, batches)
    assert counts == [2, 2, 2, 2, 2, 2, 1, 0]
    for k in ref:
        np.testing.assert_allclose(params[k], np.asarray(ref[k]), rtol=1e-4, atol=1e-6)
    assert traces == 1 and compiled == 1


def test_nan_on_padded_rows_never_reaches_the_weights():
    # Intent: a per-example loss that divides by a feature is 0/0 on every padded row; the
    # select-based masks keep that out of the forward sums and every gradient contraction.
    params, ref, _, _, _ = train(ratio_loss, data())
    for k in ref:
        assert np.all(np.isfinite(params[k]))
        np.testing.assert_allclose(params[k], np.asarray(ref[k]), rtol=1e-4, atol=1e-6)


def test_mean_and_var_per_replica_count_real_rows():
    # Intent: jnp.mean / jnp.var(axis=0) in the replica function equal NumPy's over each
    # replica's real rows; the replica with no rows gives NaN (TensorFlow's mean of nothing).
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    data_ = np.arange(1.0, 23.0, dtype=np.float32).reshape(11, 2) ** 1.5
    batches = [data_[:8], data_[8:]]  # the second: rows 1, 1, 1, 0 (padded to 2)
    for b, batch in zip(batches, strategy.experimental_distribute_dataset(batches), strict=True):
        means, variances, overall = strategy.run(
            lambda x: (jnp.mean(x, axis=0), jnp.var(x, axis=0), jnp.mean(x)), args=(batch,))
        pieces = np.array_split(b, 4) if len(b) == 8 else [b[0:1], b[1:2], b[2:3], b[3:3]]
        for piece, m, v, o in zip(pieces, means.values, variances.values, overall.values, strict=True):
            with warnings.catch_warnings():  # NumPy warns on the empty replica's NaN mean
                warnings.simplefilter("ignore", RuntimeWarning)
                want = (piece.mean(axis=0), piece.var(axis=0), piece.mean())
            np.testing.assert_allclose(np.asarray(m), want[0], rtol=1e-6)
            np.testing.assert_allclose(np.asarray(v), want[1], rtol=1e-5)
            np.testing.assert_allclose(np.asarray(o), want[2], rtol=1e-6)
        standardized = strategy.run(lambda x: jax.nn.standardize(x, axis=0), args=(batch,))
        for piece, s in zip(pieces, standardized.values, strict=True):
            want = (piece - piece.mean(axis=0)) / np.sqrt(piece.var(axis=0) + 1e-5) if len(piece) else piece
            np.testing.assert_allclose(np.asarray(s), want, rtol=1e-4, atol=1e-4)


def test_tensorflow_mean_per_replica_case():
    # Intent: TensorFlow gives [5.5, 7.0] for jnp.mean per replica of [5, 6, 7] on 2 replicas
    # (rows 2 and 1), not the padded [5.5, 3.5].
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batch = next(iter(strategy.experimental_distribute_dataset([np.array([5.0, 6.0, 7.0], np.float32)])))
    out = strategy.run(jnp.mean, args=(batch,))
    recorded = [r["value"] for r in RECORDED["mean_5_6_7_r2"]["result"]["means"]]  # TensorFlow 2.21
    assert recorded == [5.5, 7.0]
    np.testing.assert_allclose([float(v) for v in out.values], recorded)


def test_values_that_are_not_per_example_are_never_trimmed():
    # Intent: a weight-shaped [4, 2] value when each replica has 4 rows, and a [3] mean over
    # axis 0 when each has 3 rows, come back whole; reduce(SUM, axis=0) and gather use all of it.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    w = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    x = np.arange(15.0, dtype=np.float32).reshape(5, 3)  # 5 rows on 2 replicas: 3 and 2 (padded to 3)
    batch = next(iter(strategy.experimental_distribute_dataset([x])))
    shaped, means = strategy.run(lambda b: (jnp.sum(b) * jnp.asarray(w), jnp.mean(b, axis=0)), args=(batch,))
    pieces = [x[:3], x[3:]]
    for p, s, m in zip(pieces, shaped.values, means.values, strict=True):
        np.testing.assert_allclose(np.asarray(s), p.sum() * w, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(m), p.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(strategy.reduce("sum", shaped, axis=0)),
                               sum((p.sum() * w).sum(axis=0) for p in pieces), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(strategy.gather(means, axis=0)),
                               np.concatenate([p.mean(axis=0) for p in pieces]), rtol=1e-6)
    # a per-example output is still trimmed to each replica's real rows
    doubled = strategy.run(lambda b: 2.0 * b, args=(batch,))
    for p, d in zip(pieces, doubled.values, strict=True):
        np.testing.assert_array_equal(np.asarray(d), 2.0 * p)


def test_masks_show_in_the_ir_with_their_reason():
    # Intent: a user can see what was masked: sx.mask_rows ops with the reason "padded rows".
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    fn = strategy.function(lambda b: strategy.run(lambda x: jnp.sum(x), args=(b,)))
    batch = next(iter(strategy.experimental_distribute_dataset([np.arange(3.0, dtype=np.float32)])))
    text = fn.ir(batch)
    assert 'sx.mask_rows' in text and 'reason = "padded rows"' in text
    np.testing.assert_allclose([float(v) for v in fn(batch).values], [1.0, 2.0])


def test_rows_mixed_by_an_op_the_analysis_cannot_follow_raise_for_a_partial_batch():
    # Intent: flattening the row axis into another axis could let padded rows mix with real ones
    # in a later sum: the call with a partial batch raises, naming the op, the user's line and
    # sx.nn.batch_mask (full batches run: tests/test_padding_regions.py).
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batch = next(iter(strategy.experimental_distribute_dataset([np.ones((3, 2), np.float32)])))

    def replica(x):
        return jnp.sum(jnp.cumsum(x.reshape(-1)))  # the rows are flattened here

    line = here() - 2
    with pytest.raises(sx.DistributionValueError) as err:
        strategy.run(replica, args=(batch,))
    assert_names_this_line(err, line)
    assert "jax.reshape" in str(err.value) and "sx.nn.batch_mask" in str(err.value)


def test_user_mask_with_batch_mask_is_the_fix():
    # Intent: the error's fix works: masking the padded rows with sx.nn.batch_mask first says
    # what they hold, and the flattened sum is then the sum of the real rows.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)
    batch = next(iter(strategy.experimental_distribute_dataset([x])))

    def replica(x):
        x = jnp.where(sx.nn.batch_mask(x)[:, None], x, 0.0)
        return jnp.sum(x.reshape(-1))

    out = strategy.run(replica, args=(batch,))
    np.testing.assert_allclose([float(v) for v in out.values], [x[:2].sum(), x[2:].sum()])


def test_convolution_and_pooling_gradients_count_real_rows():
    # Intent: conv layers with a bias and max pooling are row-wise in the batch axis; the second
    # kernel's gradient contracts the rows (masked), so each replica's gradient is plain JAX's
    # on its real rows, although relu(conv + 0.5) is not zero on the padded ones.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    x = np.random.default_rng(3).normal(size=(3, 6, 6, 2)).astype(np.float32)  # rows 2 and 1
    k1 = np.random.default_rng(4).normal(size=(3, 3, 2, 4)).astype(np.float32)
    k2 = np.random.default_rng(5).normal(size=(3, 3, 4, 2)).astype(np.float32)

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(k1, k2, x):
        y = jax.nn.relu(conv(x, k1) + 0.5)
        y = jax.lax.reduce_window(conv(y, k2), -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(y ** 2)

    batch = next(iter(strategy.experimental_distribute_dataset([x])))
    grads = strategy.run(lambda x: jax.grad(loss, argnums=(0, 1))(jnp.asarray(k1), jnp.asarray(k2), x),
                         args=(batch,))
    for r, piece in enumerate([x[:2], x[2:]]):
        want = jax.grad(loss, argnums=(0, 1))(k1, k2, piece)
        for got, w in zip(grads, want, strict=True):
            np.testing.assert_allclose(np.asarray(got.values[r]), np.asarray(w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("devices", [["CPU:0"], ["CPU:0", "CPU:1"]])
def test_batches_taken_in_an_on_device_loop_are_masked_per_step(devices):
    # Intent: next(iterator) inside an sx.range loop marks each step's batch with its own row
    # count: jnp.mean per replica is the mean of that step's real rows, the padded last batch
    # included (with one replica too, where the loop sees the padded batch).
    strategy = sx.MirroredStrategy(devices)
    data = np.arange(1.0, 12.0, dtype=np.float32) ** 2  # batches of 4: 4, 4, 3 rows
    batches = [data[i:i + 4] for i in range(0, 11, 4)]

    @strategy.function
    def total(iterator):
        acc = jnp.float32(0.0)
        for _ in sx.range(3):
            acc = acc + strategy.reduce("SUM", strategy.run(jnp.mean, args=(next(iterator),)), axis=None)
        return acc

    n = len(devices)
    want = sum(piece.mean() for b in batches
               for piece in (np.array_split(b, n) if n == 1 else [b[:2], b[2:]]))
    np.testing.assert_allclose(float(total(iter(strategy.experimental_distribute_dataset(batches)))), want,
                               rtol=1e-6)


def test_users_own_batch_mask_is_not_followed_in_a_loop():
    # Intent: compute_average_loss masks with sx.nn.batch_mask (a select on iota < count, the
    # count sliced out of the loop's stacked inputs): the pass trusts it, so the sum over the
    # global batch size stays TensorFlow's (real rows / 4) on the partial last batch.
    strategy = sx.MirroredStrategy(["CPU:0"])
    data = np.arange(1.0, 12.0, dtype=np.float32)
    batches = [data[i:i + 4] for i in range(0, 11, 4)]

    @strategy.function
    def total(iterator):
        acc = 0.0
        for _ in sx.range(3):
            loss = strategy.run(lambda x: sx.nn.compute_average_loss(x, global_batch_size=4), args=(next(iterator),))
            acc = acc + strategy.reduce("SUM", loss, axis=None)
        return acc

    np.testing.assert_allclose(float(total(iter(strategy.experimental_distribute_dataset(batches)))),
                               sum(b.sum() / 4 for b in batches), rtol=1e-6)


def test_reduce_over_axis_0_in_a_function_trims_only_per_example_values():
    # Intent: inside one strategy.function, reduce(SUM/MEAN, v, axis=0) drops padded rows of a
    # per-example value only; a [3, 2] value computed from a row sum (each replica has 3 rows)
    # is summed and averaged whole.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    x = np.arange(10.0, dtype=np.float32).reshape(5, 2)  # rows 3 and 2 (padded to 3)
    w = np.arange(6.0, dtype=np.float32).reshape(3, 2)

    @strategy.function
    def stats(batch):
        per_example, shaped = strategy.run(lambda b: (b * 2.0, jnp.sum(b) * jnp.asarray(w)), args=(batch,))
        return (strategy.reduce("sum", per_example, axis=0), strategy.reduce("mean", per_example, axis=0),
                strategy.reduce("sum", shaped, axis=0), strategy.reduce("mean", shaped, axis=0))

    pieces = [x[:3], x[3:]]
    s_pe, m_pe, s_w, m_w = stats(next(iter(strategy.experimental_distribute_dataset([x]))))
    np.testing.assert_allclose(np.asarray(s_pe), (2 * x).sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m_pe), (2 * x).mean(axis=0), rtol=1e-6)
    shaped = np.concatenate([p.sum() * w for p in pieces])
    np.testing.assert_allclose(np.asarray(s_w), shaped.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m_w), shaped.mean(axis=0), rtol=1e-6)


RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/padding.json").read_text())["scenarios"]


def _values(records):
    return [np.asarray(r["value"], np.float32) for r in records]


def test_recorded_tensorflow_batch_statistics_on_a_partial_batch():
    # Intent: TensorFlow 2.21's tf.reduce_mean(x, 0), tf.math.reduce_variance(x, 0) and
    # tf.reduce_mean(x) inside strategy.run on 4 replicas, a full batch then rows 1, 1, 1, 0
    # (tools/tf_record/record_padding.py): the same numbers from jnp.mean / jnp.var, NaN on
    # the replica with no rows.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    x = np.arange(1.0, 23.0, dtype=np.float32).reshape(11, 2) ** 1.5
    steps = RECORDED["stats_axis0_r4"]["result"]["steps"]
    dist = strategy.experimental_distribute_dataset([x[:8], x[8:]])
    for step, batch in zip(steps, dist, strict=True):
        assert [len(v) for v in batch.values] == step["rows"]
        out = strategy.run(lambda b: (jnp.mean(b, axis=0), jnp.var(b, axis=0), jnp.mean(b)), args=(batch,))
        for got, key in zip(out, ("mean0", "var0", "mean"), strict=True):
            for g, want in zip(got.values, _values(step[key]), strict=True):
                np.testing.assert_allclose(np.asarray(g), want, rtol=2e-5, atol=1e-4)
