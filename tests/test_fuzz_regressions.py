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
