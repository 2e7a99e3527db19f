"""Gradients compressed on the wire (`CommunicationOptions(compression=...)`, the
compress-collectives pass): the step's numbers stay within the narrow type's rounding of
plain JAX's, the bytes moved halve, the compiled program reduces in the narrow type, and
variable aggregation keeps its full type."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx

N = 8
# A sum of N values each rounded to the narrow type, reduced in it and rounded again: a few of
# its ulps relative to the largest (bf16 keeps 8 significant bits, f16 11).
TOLERANCE = {"bf16": 2 ** -5, "f16": 2 ** -8}


def loss(w, x):
    return jnp.sum(jnp.sin(x @ w) ** 2)


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, 2, 16)).astype(np.float32), rng.normal(size=(16, 32)).astype(np.float32)


def reference_grads(xs, w) -> np.ndarray:
    """The summed gradient in plain JAX on one device, in float32."""
    return np.asarray(sum(jax.grad(loss)(jnp.asarray(w), jnp.asarray(x)) for x in xs))


def gradient_step(strategy, api: str, options=None):
    @strategy.function
    def step(w, x):
        def replica(w, x):
            g = jax.grad(loss)(w, x)
            if api == "all_reduce":
                return sx.get_replica_context().all_reduce("SUM", g, options=options)
            return sx.get_replica_context().merge_call(
                lambda s, g: s.extended.batch_reduce_to("SUM", [(g, None)], options)[0], args=(g,))
        return strategy.run(replica, args=(w, x))
    return step


@pytest.mark.parametrize("where", ["all_reduce", "batch_reduce_to", "strategy"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_compressed_gradients_are_plain_jax_within_the_narrow_types_rounding(where, dtype):
    # Intent: asked on the call or as the strategy's default, the summed gradient is plain
    # JAX's within the narrow type's rounding, and visibly rounded (the same step without
    # compression is within 1e-5); the IR shows both casts with their reason, the compiled
    # program reduces in the narrow type, and the bytes moved are half.
    xs, w = data()
    options = sx.CommunicationOptions(compression=dtype)
    strategy = sx.MirroredStrategy(communication_options=options if where == "strategy" else None)
    api = "batch_reduce_to" if where == "batch_reduce_to" else "all_reduce"
    step = gradient_step(strategy, api, None if where == "strategy" else options)
    plain = gradient_step(strategy, api, sx.CommunicationOptions(compression="none"))
    x = strategy.experimental_distribute_values_from_function(lambda c: xs[c.replica_id_in_sync_group])
    want = reference_grads(xs, w)
    got = np.asarray(strategy.experimental_local_results(step(w, x))[0])
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=scale * TOLERANCE[dtype])
    assert np.abs(got - want).max() > scale * 1e-6  # it was sent narrow: the rounding shows
    exact = np.asarray(strategy.experimental_local_results(plain(w, x))[0])
    np.testing.assert_allclose(exact, want, rtol=1e-5, atol=scale * 1e-6)
    text = step.ir(w, x)
    assert text.count("sx.convert") == 2 and f"sent as {dtype}" in text and f"({dtype} on the wire)" in text
    # what XLA is handed: the all-reduce of the narrow type (XLA:CPU then sums it in float32)
    assert f"}}) : (tensor<16x32x{dtype}>) -> tensor<16x32x{dtype}>" in step.stablehlo(w, x)
    assert step.stats(w, x).bytes_per_replica * 2 == plain.stats(w, x).bytes_per_replica


def test_variable_aggregation_is_never_compressed():
    # Intent: with bf16 as the strategy's default, a SUM-aggregated mirrored variable updated
    # in replica context is all-reduced in float32 (exactly NumPy's sum), while the gradient
    # reduction beside it is compressed.
    strategy = sx.MirroredStrategy(communication_options=sx.CommunicationOptions(compression="bf16"))
    with strategy.scope():
        total = sx.Variable(jnp.zeros(3), aggregation=sx.VariableAggregation.SUM)
    pieces = [np.array([1.0, 1e-3, 3.0], np.float32) * (i + 1) + 1e-4 for i in range(N)]
    x = strategy.experimental_distribute_values_from_function(lambda c: pieces[c.replica_id_in_sync_group])

    @strategy.function
    def step(x):
        def replica(x):
            total.assign_add(x)
            return sx.get_replica_context().all_reduce("SUM", x)
        return strategy.run(replica, args=(x,))

    reduced = step(x)
    np.testing.assert_allclose(total.numpy(), np.sum(pieces, 0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(strategy.experimental_local_results(reduced)[0]), np.sum(pieces, 0),
                               rtol=TOLERANCE["bf16"])
    text = step.ir(x)
    assert text.count("sx.convert") == 2
    assert any("aggregation of an update" in line and ": f32[3]" in line for line in text.splitlines())


def test_compression_option_is_checked_and_applies_to_floats_only():
    # Intent: an unknown compression names the choices; under a bf16 default an integer SUM
    # and a loss reduced by strategy.reduce (not a gradient) are sent as they are: exact.
    with pytest.raises(sx.DistributionValueError, match="'bf16', 'f16'"):
        sx.CommunicationOptions(compression="int8")
    strategy = sx.MirroredStrategy(communication_options=sx.CommunicationOptions(compression="bf16"))
    counts = strategy.experimental_distribute_values_from_function(
        lambda c: jnp.int32(1000 + c.replica_id_in_sync_group))

    @strategy.function
    def step(n):
        total = strategy.run(lambda n: sx.get_replica_context().all_reduce("SUM", n), args=(n,))
        return total, strategy.reduce("SUM", strategy.run(lambda n: n.astype(jnp.float32) + 0.001, args=(n,)),
                                      axis=None)

    total, loss = step(counts)
    assert int(strategy.experimental_local_results(total)[0]) == sum(1000 + i for i in range(N))
    np.testing.assert_allclose(float(loss), np.sum(np.arange(1000, 1008, dtype=np.float32) + np.float32(0.001)),
                               rtol=1e-7)
    assert "sx.convert" not in step.ir(counts)
