"""Record TensorFlow's answers for issue 35 ("a compiler you can trust"): the two programs a
differential fuzzer found wrong in strategax (two all_gathers of one value, one of them
summed; a MEAN-aggregated variable updated then read back into further all_reduces), and
TensorFlow's testGatherDiffShapeAtAxis0 in a tf.function: `strategy.gather` (and `reduce`)
of a PerReplica whose components differ in shape on axis 0, captured from the enclosing scope.

Writes tests/data/tf/trust.json via run_all.sh (``python record_trust.py --scenario NAME``).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, main  # noqa: E402


def _per_replica(st, fn):
    return st.experimental_distribute_values_from_function(lambda ctx: fn(ctx.replica_id_in_sync_group))


@scenario("gather_twice_one_summed", devices=(2,))
def gather_twice_one_summed(tf, n):
    """x = [0, 1, 2] + 10 r on replica r; in a tf.function each replica gathers x twice along
    axis 0 and returns (sum of the first gather, the second gather)."""
    st = mirrored(tf, n)
    x = _per_replica(st, lambda r: tf.range(3, dtype=tf.float32) + 10.0 * r)

    def rf(x):
        ctx = tf.distribute.get_replica_context()
        a = ctx.all_gather(x, 0)
        b = ctx.all_gather(x, 0)
        return tf.reduce_sum(a, axis=0), b

    try:
        return enc(tf.function(lambda x: st.run(rf, args=(x,)))(x))
    except Exception as e:  # noqa: BLE001 -- we record every error
        return err(e)


@scenario("mean_variable_then_reduced", devices=(4,))
def mean_variable_then_reduced(tf, n):
    """A MEAN-aggregated variable of zeros(3) takes assign_add(x) (x = r + 1 everywhere on replica
    r); y = its value * (r + 1); each replica returns all_reduce(MEAN, all_reduce(MEAN, y) +
    all_reduce(MEAN, y)), in a tf.function; also the variable's value after the step."""
    st = mirrored(tf, n)
    with st.scope():
        v = tf.Variable(tf.zeros(3), aggregation=tf.VariableAggregation.MEAN)
    x = _per_replica(st, lambda r: tf.fill([3], float(r + 1)))

    def rf(x):
        ctx = tf.distribute.get_replica_context()
        v.assign_add(x)
        y = v.read_value() * (tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0)
        a = ctx.all_reduce("MEAN", y) + ctx.all_reduce("MEAN", y)
        return ctx.all_reduce("MEAN", a)

    try:
        out = tf.function(lambda x: st.run(rf, args=(x,)))(x)
        return {"result": enc(out), "variable": enc(v.read_value())}
    except Exception as e:  # noqa: BLE001
        return err(e)


@scenario("gather_diff_shape_axis0_captured", devices=(2, 4))
def gather_diff_shape_axis0_captured(tf, n):
    """TensorFlow's strategy_gather_test testGatherDiffShapeAtAxis0 (pure_eager=False): ones of
    shape (r + 1, 1) on replica r (int32), captured by a tf.function that returns
    strategy.gather(value, axis=0); also strategy.reduce(SUM / MEAN, value, axis=0) captured
    the same way, and the same gather of float values 10 r + k."""
    st = mirrored(tf, n)
    ones = _per_replica(st, lambda r: tf.constant(1, shape=(r + 1, 1)))
    floats = _per_replica(st, lambda r: tf.reshape(tf.range(r + 1, dtype=tf.float32) + 10.0 * r, [r + 1, 1]))
    out = {}
    for name, body in (("gather_ones", lambda: st.gather(ones, axis=0)),
                       ("gather_floats", lambda: st.gather(floats, axis=0)),
                       ("reduce_sum_floats", lambda: st.reduce("SUM", floats, axis=0)),
                       ("reduce_mean_floats", lambda: st.reduce("MEAN", floats, axis=0))):
        try:
            out[name] = enc(tf.function(body)())
        except Exception as e:  # noqa: BLE001
            out[name] = err(e)
    return out


@scenario("dot_along_padded_axis", devices=(2,))
def dot_along_padded_axis(tf, n):
    """Contractions along an axis whose length differs across replicas (strategax pads it to
    the largest), in a tf.function. Per-replica values of widths 3 and 2 (ones (2, 3 - r)):
    x @ W with W a fixed (3, 3) matrix; x @ transpose(x) (both operands the replica's own
    width); ones(width) @ transpose(x) with the width read from x. The partial last batch of a
    dataset of 7 rows of [3k, 3k+1, 3k+2] batched by 4 (rows 2 and 1): (row sums) @ W2, W2 a
    fixed (2, 2) matrix [[1, 2], [3, 4]]; transpose(x) @ x; einsum("rk,rc->kc", W2, x);
    ones(rows) @ x. Also each replica's static shape of x inside the function."""
    import numpy as np
    st = mirrored(tf, n)
    wide = _per_replica(st, lambda r: tf.ones((2, 3 - r)))
    w = tf.constant(np.arange(9, dtype=np.float32).reshape(3, 3) / 8.0)
    w2 = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    data = tf.data.Dataset.from_tensor_slices(np.arange(21, dtype=np.float32).reshape(7, 3)).batch(4)
    *_, last = iter(st.experimental_distribute_dataset(data))
    cases = {
        "wide_x_at_fixed_w": (wide, lambda x: tf.matmul(x, w)),
        "wide_x_at_x_t": (wide, lambda x: tf.matmul(x, x, transpose_b=True)),
        "wide_ones_at_x_t": (wide, lambda x: tf.linalg.matvec(x, tf.ones(tf.shape(x)[-1]))),
        "wide_static_shape": (wide, lambda x: tf.constant(str(x.shape))),
        "rows_sums_at_fixed_w2": (last, lambda x: tf.linalg.matvec(w2, tf.reduce_sum(x, -1), transpose_a=True)),
        "rows_x_t_at_x": (last, lambda x: tf.matmul(x, x, transpose_a=True)),
        "rows_einsum_fixed_w2": (last, lambda x: tf.einsum("rk,rc->kc", w2, x)),
        "rows_ones_at_x": (last, lambda x: tf.linalg.matvec(x, tf.ones(tf.shape(x)[0]), transpose_a=True)),
        "rows_static_shape": (last, lambda x: tf.constant(str(x.shape))),
    }
    out = {"local_shapes": {"wide": [list(v.shape) for v in st.experimental_local_results(wide)],
                            "rows": [list(v.shape) for v in st.experimental_local_results(last)]}}
    for name, (value, body) in cases.items():
        try:
            out[name] = enc(tf.function(lambda x, body=body: st.run(body, args=(x,)))(value))
        except Exception as e:  # noqa: BLE001
            out[name] = err(e)
    return out


if __name__ == "__main__":
    sys.exit(main())
