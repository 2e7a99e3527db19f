"""Programs a differential fuzzer found wrong (issue 35 and tests/fuzz/), each against an
independent answer: TensorFlow 2.21's recorded output (tests/data/tf/trust.json,
tools/tf_record/record_trust.py) or the same computation in NumPy."""
import json
import pathlib

import jax.numpy as jnp
import numpy as np

import strategax as sx
from test_tf_semantics import assert_tree

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/trust.json").read_text())["scenarios"]


def mirrored(n: int):
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])


def per_replica(strategy, fn):
    return strategy.experimental_distribute_values_from_function(lambda c: fn(c.replica_id_in_sync_group))


def test_two_gathers_of_one_value_one_summed():
    # simplify-collectives merged the second gather into the first, then turned the first (its
    # uses counted without the merged one's) into an all_reduce and erased it: KeyError <id>.
    strategy = mirrored(2)
    x = per_replica(strategy, lambda r: np.arange(3, dtype=np.float32) + 10 * r)

    def rf(x):
        ctx = sx.get_replica_context()
        a = ctx.all_gather(x, 0)
        b = ctx.all_gather(x, 0)
        return jnp.sum(a, axis=0), b

    got = strategy.function(lambda x: strategy.run(rf, args=(x,)))(x)
    assert_tree(got, RECORDED["gather_twice_one_summed_r2"]["result"])


def test_gather_summed_then_the_same_gather_again():
    # the gather turned into an all_reduce was forgotten under a key it was never stored by,
    # so a later gather of the same value reused the erased one.
    strategy = mirrored(4)
    pieces = [np.arange(2, dtype=np.float32) * (r + 1) for r in range(4)]
    x = per_replica(strategy, lambda r: pieces[r])

    def rf(x):
        ctx = sx.get_replica_context()
        s = jnp.sum(ctx.all_gather(x, 0), axis=0)
        return s, ctx.all_gather(x, 0)

    s, g = strategy.function(lambda x: strategy.run(rf, args=(x,)))(x)
    for r in range(4):
        np.testing.assert_allclose(s.values[r], np.sum(np.concatenate(pieces)))
        np.testing.assert_array_equal(g.values[r], np.concatenate(pieces))


def test_reductions_of_a_value_read_back_after_a_mean_variable_update():
    # fuse-collectives bucketed the variable's aggregation with the reductions of the value read
    # back after the update (a dependency through the variable, not through a value): a cycle.
    strategy = mirrored(4)
    with strategy.scope():
        v = sx.Variable(np.zeros(3, np.float32), aggregation=sx.VariableAggregation.MEAN)
    x = per_replica(strategy, lambda r: np.full(3, r + 1, np.float32))

    def rf(x):
        ctx = sx.get_replica_context()
        v.assign_add(x)
        y = v.read_value() * (jnp.asarray(ctx.replica_id_in_sync_group, jnp.float32) + 1)
        a = ctx.all_reduce("MEAN", y) + ctx.all_reduce("MEAN", y)
        return ctx.all_reduce("MEAN", a)

    got = strategy.function(lambda x: strategy.run(rf, args=(x,)))(x)
    rec = RECORDED["mean_variable_then_reduced_r4"]["result"]
    assert_tree(got, rec["result"])
    assert_tree(v.read_value(), rec["variable"])


def _dot_cases(strategy):
    """The contractions of record_trust.py's dot_along_padded_axis, as the user writes them in
    JAX (a fixed matrix is a constant of the traced, padded width), and the values they take."""
    wide = per_replica(strategy, lambda r: np.ones((2, 3 - r), np.float32))
    data = sx.data.Dataset.from_tensor_slices(np.arange(21, dtype=np.float32).reshape(7, 3)).batch(4)
    *_, last = iter(strategy.experimental_distribute_dataset(data))  # rows 2 and 1
    w = jnp.asarray(np.arange(9, dtype=np.float32).reshape(3, 3) / 8.0)
    w2 = jnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    return {
        "wide_x_at_fixed_w": (wide, lambda x: x @ w),
        "wide_x_at_x_t": (wide, lambda x: x @ x.T),
        "wide_ones_at_x_t": (wide, lambda x: x @ jnp.ones(x.shape[-1])),
        "rows_sums_at_fixed_w2": (last, lambda x: jnp.sum(x, -1) @ w2),
        "rows_x_t_at_x": (last, lambda x: x.T @ x),
        "rows_einsum_fixed_w2": (last, lambda x: jnp.einsum("rk,rc->kc", w2, x)),
        "rows_ones_at_x": (last, lambda x: jnp.ones(x.shape[0]) @ x),
    }


def test_contraction_along_a_padded_axis_answers_as_tensorflow_or_raises_naming_the_line():
    # The fuzzer's open question (docs/testing.md): a dot contracting an axis whose real extent
    # differs across replicas (per-replica values of different widths, a partial batch's rows).
    # With the other operand of a fixed size (a constant matrix) TensorFlow raises where a
    # replica's extent is smaller, and strategax, which pads to the largest, cannot give its
    # answer: it must raise at trace time naming the user's line and the fix, not contract the
    # padding. With both operands from the replica's own value (x^T x, ones of its shape) the
    # masked contraction is TensorFlow's answer.
    strategy = mirrored(2)
    rec = RECORDED["dot_along_padded_axis_r2"]["result"]
    assert rec["local_shapes"] == {"wide": [[2, 3], [2, 2]], "rows": [[2, 3], [1, 3]]}
    for name, (value, body) in _dot_cases(strategy).items():
        want = rec[name]
        step = strategy.function(lambda x, body=body: strategy.run(body, args=(x,)))
        if "error" in want:
            tf_said = want["message"] + want.get("message_tail", "")
            assert want["error"] == "ValueError" and "Dimensions must be" in tf_said, want
            try:
                step(value)
            except sx.DistributionValueError as e:
                text = str(e)
                assert e.file.endswith("test_fuzz_regressions.py") and e.line == body.__code__.co_firstlineno, text
                assert "meets a constant" in text and "fix: " in text, text
                assert "jnp.ones(x.shape[0])" in text, text
            else:
                raise AssertionError(f"{name}: TensorFlow raises, strategax answered")
        else:
            assert_tree(step(value), want)
