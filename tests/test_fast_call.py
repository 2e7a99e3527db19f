"""The cached call's shortcut (trace/fast_call.py): a repeated call skips the signature, and
any call that does not fit the compiled program (shape, dtype, kind, static value, variable,
layout) still runs the right program and gives one-device NumPy's numbers."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from strategax.trace import function as function_module

N = 8


@pytest.fixture
def st():
    return sx.MirroredStrategy()


@pytest.fixture
def signatures(monkeypatch):
    """How many calls built a full signature (took the slow path)."""
    count = [0]
    original = function_module.signature

    def counting(*a, **k):
        count[0] += 1
        return original(*a, **k)

    monkeypatch.setattr(function_module, "signature", counting)
    return count


def per_replica(st, pieces):
    return st.experimental_distribute_values_from_function(lambda c: pieces[c.replica_id_in_sync_group])


def test_a_training_loop_takes_the_shortcut_and_matches_numpy(st, signatures):
    # Intent: parameters fed back from the last call (a pytree of Mirrored values) and the
    # same batch: after the first call no signature is built, and 5 SGD steps give NumPy's weights.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N * 2, 3)).astype(np.float32)
    y = rng.normal(size=(N * 2,)).astype(np.float32)
    batch = (per_replica(st, [x[i * 2:(i + 1) * 2] for i in range(N)]),
             per_replica(st, [y[i * 2:(i + 1) * 2] for i in range(N)]))

    @st.function
    def step(params, batch):
        def replica(params, xb, yb):
            g = jax.grad(lambda p: jnp.sum((xb @ p["w"] + p["b"] - yb) ** 2) / (N * 2))(params)
            g = sx.get_replica_context().all_reduce("SUM", g)
            return jax.tree.map(lambda p, d: p - 0.1 * d, params, g)
        return st.run(replica, args=(params, *batch))

    params = {"w": jnp.array([0.5, -0.25, 1.0]), "b": jnp.float32(0.0)}
    for _ in range(5):
        params = step(params, batch)
    assert signatures[0] == 2  # the first call (plain arrays), the second (Mirrored outputs)
    w, b = np.array([0.5, -0.25, 1.0], np.float32), np.float32(0.0)
    for _ in range(5):
        r = x @ w + b - y
        w, b = w - 0.1 * (2 * x.T @ r / (N * 2)), b - 0.1 * (2 * r.sum() / (N * 2))
    np.testing.assert_allclose(np.asarray(params["w"].values[0]), w, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(params["b"].values[3]), b, rtol=1e-5, atol=1e-6)


def test_calls_that_do_not_fit_take_the_full_path_and_stay_right(st):
    # Intent: after the shortcut is built, a new shape, dtype, kind, static value or layout
    # each reaches its own program: every answer is NumPy's.
    @st.function
    def f(x, y, scale):
        return st.run(lambda a, b: sx.get_replica_context().all_reduce("SUM", a * scale) + b, args=(x, y))

    def check(out, pieces, y, scale):
        want = np.sum([p * scale for p in pieces], 0) + np.asarray(y)
        for v in st.experimental_local_results(out):
            np.testing.assert_allclose(np.asarray(v), want, rtol=1e-6)

    p4 = [np.arange(4, dtype=np.float32) + i for i in range(N)]
    x4, y4 = per_replica(st, p4), jnp.ones(4)
    for _ in range(3):
        check(f(x4, y4, 2.0), p4, y4, 2.0)
    check(f(x4, y4, 3.0), p4, y4, 3.0)  # another static value
    check(f(x4, y4, -0.0), p4, y4, -0.0)
    p6 = [np.arange(6, dtype=np.float32) * i for i in range(N)]
    check(f(per_replica(st, p6), jnp.ones(6), 2.0), p6, jnp.ones(6), 2.0)  # another shape
    check(f(x4, jnp.ones(4, jnp.int32), 2.0), p4, np.ones(4), 2.0)  # another dtype
    mirrored = st.experimental_distribute_values_from_function(lambda c: np.full(4, 5.0, np.float32))
    out = f(x4, mirrored, 2.0)  # a Mirrored where an array was: Mirrored's value is the array
    check(out, p4, np.full(4, 5.0), 2.0)
    again = f(x4, y4, 2.0)
    check(again, p4, y4, 2.0)
    check(f(again, y4, 1.0), [np.asarray(again.values[0])] * N, y4, 1.0)  # Mirrored as x: SUM over 8 copies
    other = sx.MirroredStrategy(jax.devices()[:4])  # another mesh: the value is re-laid out
    x_other = other.experimental_distribute_values_from_function(
        lambda c: np.arange(4, dtype=np.float32) + c.replica_id_in_sync_group)
    with pytest.raises(sx.DistributionValueError):
        f(x_other, y4, 2.0)  # 4 components for 8 replicas: the full path's error, not a wrong run


def test_variables_are_matched_by_identity(st, signatures):
    # Intent: a variable argument is state: the shortcut reuses the program only for the same
    # variable; another variable is its own program, and both end with NumPy's values.
    with st.scope():
        v1, v2 = sx.Variable(jnp.zeros(3)), sx.Variable(jnp.ones(3))

    @st.function
    def add(var, x):
        st.run(lambda a: var.assign_add(a), args=(x,))
        return var.read_value()

    x = jnp.array([1.0, 2.0, 3.0])
    for _ in range(3):
        add(v1, x)
    assert signatures[0] == 1
    add(v2, x)
    add(v1, x)
    np.testing.assert_allclose(v1.numpy(), 4 * np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(v2.numpy(), 1 + np.array([1.0, 2.0, 3.0]))


def test_a_call_inside_another_function_is_inlined_not_run(st):
    # Intent: once a shortcut exists, calling the function while another one traces still
    # inlines it (the outer program computes it), as TensorFlow nests tf.functions.
    inner = st.function(lambda v: v * 2.0)
    v = jnp.ones(2)
    for _ in range(2):
        inner(v)
    outer = st.function(lambda v: inner(v) + 1.0)
    np.testing.assert_allclose(np.asarray(outer(jnp.full(2, 3.0))), [7.0, 7.0])


def test_a_prng_key_fed_back_matches_plain_jax(st, signatures):
    # Intent: a typed key goes in as its key data and comes back wrapped, through the shortcut
    # too: 4 calls give plain JAX's keys and draws.
    f = st.function(lambda key: (jax.random.split(key)[0], jax.random.normal(jax.random.split(key)[1], (3,))))
    key, ref = jax.random.key(7), jax.random.key(7)
    for _ in range(4):
        key, draw = f(key)
        ref, sub = jax.random.split(ref)
        np.testing.assert_allclose(np.asarray(draw), np.asarray(jax.random.normal(sub, (3,))), rtol=1e-6)
    assert signatures[0] == 1
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(ref))


def test_traced_python_scalars_take_the_shortcut_with_their_values(st, signatures):
    # Intent: with reduce_retracing a Python float is an input: the shortcut passes each call's
    # value (not the first one's).
    f = st.function(lambda x, s: x * s, reduce_retracing=True)
    x = jnp.arange(3.0)
    for s in (2.0, 3.0, 0.5, -1.5):
        np.testing.assert_allclose(np.asarray(f(x, s)), np.arange(3.0) * s)
    assert signatures[0] == 1


def test_a_leaf_replaced_by_a_container_takes_the_full_path(st, signatures):
    # Intent: when every argument is one leaf the shortcut skips flattening; an argument that
    # becomes a tuple, a dict or None must still reach its own program, with NumPy's numbers.
    f = st.function(lambda v, s: jax.tree.map(lambda a: a * 2.0 + (0.0 if s is None else s), v))
    x = jnp.arange(3.0)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x, 1.0)), np.arange(3.0) * 2 + 1)
    assert signatures[0] == 1
    (t,) = f((x,), 1.0)
    np.testing.assert_allclose(np.asarray(t), np.arange(3.0) * 2 + 1)
    np.testing.assert_allclose(np.asarray(f({"a": x}, 1.0)["a"]), np.arange(3.0) * 2 + 1)
    np.testing.assert_allclose(np.asarray(f(x, None)), np.arange(3.0) * 2)
    assert signatures[0] == 4


def test_outputs_of_every_container_come_back_through_the_shortcut(st, signatures):
    # Intent: the shortcut writes tuples, lists, dicts and None out and leaves other pytrees
    # (a namedtuple) to JAX: each call gives the same structure and NumPy's numbers.
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")
    f = st.function(lambda x: ((x + 1.0,), [x * 2.0, None], {"z": x - 1.0, "a": {"k": x}}, Pair(x, ())))
    x = jnp.arange(3.0)
    ref = np.arange(3.0)
    for _ in range(3):
        (one,), (two, none), d, pair = f(x)
        assert none is None and list(d) == ["a", "z"] and type(pair) is Pair and pair.b == ()
        for got, want in ((one, ref + 1), (two, ref * 2), (d["z"], ref - 1), (d["a"]["k"], ref), (pair.a, ref)):
            np.testing.assert_allclose(np.asarray(got), want)
    assert signatures[0] == 1


@pytest.mark.parametrize("make", [lambda: sx.MirroredStrategy(jax.devices()[:1]),
                                  lambda: sx.OneDeviceStrategy(jax.devices()[0])], ids=["mirrored1", "one_device"])
def test_one_replica_hands_back_plain_arrays_through_the_shortcut(make, signatures):
    # Intent: with one replica TensorFlow returns plain values: a per-replica scalar, a
    # per-replica vector and a reduced value come back as arrays of the one replica's shape,
    # the same from the shortcut as from the first call, with NumPy's numbers.
    st = make()

    @st.function
    def f(x, s):
        per = st.run(lambda a, b: (a * 2.0, b + 1.0), args=(x, s))
        return per, st.reduce("SUM", per[0], axis=None)

    x = st.experimental_distribute_values_from_function(lambda c: np.arange(4, dtype=np.float32))
    s, want_s = jnp.float32(3.0), 3.0
    for _ in range(4):
        (vec, scalar), total = f(x, s)
        want_s += 1.0
        for got, want in ((vec, np.arange(4.0) * 2), (scalar, np.float32(want_s)), (total, np.arange(4.0) * 2)):
            assert isinstance(got, jax.Array) and got.shape == np.shape(want)
            np.testing.assert_allclose(np.asarray(got), want)
        s = scalar  # an output fed back is a plain array too
    assert signatures[0] == 1  # the fed-back scalar fits the shortcut too
