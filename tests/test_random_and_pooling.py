"""Max pooling's gradient and jax.random inside replica functions, against plain JAX on one
device: primitives with primitive-valued parameters (`select_prim`) and PRNG keys (typed,
legacy, made inside) import, round-trip through the IR text and lower to the same numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import strategax as sx

N = 4


def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def pool_loss(w, x):
    return jnp.sum(max_pool(jnp.tanh(x * w)) ** 2)


def test_max_pool_gradient_matches_plain_jax_and_round_trips():
    # Intent: jax.grad through lax.reduce_window(max) (select_and_scatter_add, whose select_prim
    # is a primitive) compiles, prints `#primitive<"ge">`, parses back to the same text and gives
    # plain JAX's gradient for each replica's batch.
    s = strategy()
    x = np.random.RandomState(0).randn(8, 4, 4, 3).astype(np.float32)
    w = np.float32(0.7)
    dist = next(iter(s.experimental_distribute_dataset([x])))
    step = s.function(lambda w, x: s.run(jax.grad(pool_loss, argnums=(0, 1)), args=(w, x)))
    gw, gx = step(w, dist)
    for r, (a, b) in enumerate(zip(s.experimental_local_results(gw), s.experimental_local_results(gx))):
        rw, rx = jax.grad(pool_loss, argnums=(0, 1))(w, x[2 * r:2 * r + 2])
        np.testing.assert_allclose(a, rw, rtol=1e-5)
        np.testing.assert_allclose(b, rx, rtol=1e-5, atol=1e-7)
    text = step.ir(w, dist)
    assert 'select_prim = #primitive<"ge">' in text
    assert sx.ir.print_module(sx.ir.parse(text)) == text


def test_primitive_attribute_text_names_a_known_primitive():
    # Intent: the parser rebuilds a primitive attribute from its name only, and rejects a name
    # no primitive has with a ParseError at that position.
    good = ('module @m attributes {num_replicas = 1} {\n'
            '  func @main(%x: f32[4] mirrored, %s: f32[2] mirrored) -> (f32[4] mirrored) {\n'
            '    %1 = jax.select_and_scatter_add %s, %x {select_prim = #primitive<"ge">, '
            'window_dimensions = (2,), window_strides = (2,), padding = ((0, 0),)} : f32[4] mirrored\n'
            '    return %1\n  }\n}\n')
    module = sx.ir.parse(good)
    op = module.main.body.ops[0]
    assert op.attrs["select_prim"] == sx.ir.PrimitiveRef("ge")  # plain data; the primitive when bound
    assert sx.dialects.from_attr(op.attrs["select_prim"]) is lax.ge_p
    text = sx.ir.print_module(module)
    assert '#primitive<"ge">' in text and sx.ir.print_module(sx.ir.parse(text)) == text
    with pytest.raises(sx.ir.ParseError) as e:
        sx.ir.parse(good.replace('"ge"', '"no_such_prim"'))
    assert "unknown primitive" in str(e.value) and e.value.line == 3


def test_custom_rules_under_grad_match_plain_jax():
    # Intent: custom_jvp (relu), custom_vjp and jax.checkpoint under jax.grad are inlined and
    # give plain JAX's gradient.
    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))

    def loss(w, x):
        h = jax.checkpoint(lambda h: jnp.sin(h) * 3.0)(jax.nn.relu(x @ w))
        return jnp.sum(clip_grad(h) ** 2)

    s = strategy()
    w = np.random.RandomState(1).randn(3, 5).astype(np.float32)
    x = np.random.RandomState(2).randn(8, 3).astype(np.float32)
    dist = next(iter(s.experimental_distribute_dataset([x])))
    g = s.function(lambda w, x: s.run(jax.grad(loss), args=(w, x)))(w, dist)
    for r, got in enumerate(s.experimental_local_results(g)):
        np.testing.assert_allclose(got, jax.grad(loss)(w, x[2 * r:2 * r + 2]), rtol=1e-5, atol=1e-7)


def test_key_made_inside_replica_function():
    # Intent: jax.random.key and jax.random.PRNGKey made inside the replica function draw
    # plain JAX's numbers, the same on every replica.
    s = strategy()

    def draw():
        return (jax.random.normal(jax.random.key(3), (2, 3)),
                jax.random.uniform(jax.random.PRNGKey(4), (5,)))

    a, b = s.function(lambda: s.run(draw))()
    want_a, want_b = draw()
    for got_a, got_b in zip(s.experimental_local_results(a), s.experimental_local_results(b)):
        np.testing.assert_array_equal(got_a, want_a)
        np.testing.assert_array_equal(got_b, want_b)


@pytest.mark.parametrize("make", [jax.random.key, jax.random.PRNGKey], ids=["typed", "legacy"])
def test_key_passed_in_split_and_returned(make):
    # Intent: a typed key (jax.random.key) or a legacy uint32 key (PRNGKey) passed into a
    # strategy.function is split, used and returned as plain JAX does; the returned typed
    # key is a typed key again.
    s = strategy()

    def step(key):
        key, sub = jax.random.split(key)
        keys = jax.random.split(sub, 3)
        return key, jax.random.normal(keys[1], (4,)) + jax.random.bernoulli(sub, 0.3, (4,))

    f = s.function(lambda key: step(key))
    key = make(11)
    got_key, got = f(key)
    want_key, want = step(key)
    np.testing.assert_array_equal(jax.random.key_data(got_key), jax.random.key_data(want_key))
    assert got_key.dtype == want_key.dtype
    np.testing.assert_array_equal(got, want)
    got_key2, _ = f(got_key)  # the same program, fed its own output
    np.testing.assert_array_equal(jax.random.key_data(got_key2), jax.random.key_data(step(want_key)[0]))


def dropout(key, x, rate):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def test_dropout_with_per_replica_keys_from_the_replica_id():
    # Intent: the documented idiom, fold_in(key, replica_id_in_sync_group), gives each replica
    # its own dropout mask: replica r's output is plain JAX's with fold_in(key, r).
    s = strategy()
    x = np.random.RandomState(3).randn(8, 6).astype(np.float32) + 3.0
    dist = next(iter(s.experimental_distribute_dataset([x])))

    def replica_fn(key, x):
        rid = sx.get_replica_context().replica_id_in_sync_group
        return dropout(jax.random.fold_in(key, rid), x, 0.5)

    key = jax.random.key(0)
    out = s.function(lambda key, x: s.run(replica_fn, args=(key, x)))(key, dist)
    results = s.experimental_local_results(out)
    for r, got in enumerate(results):
        np.testing.assert_array_equal(got, dropout(jax.random.fold_in(key, r), x[2 * r:2 * r + 2], 0.5))
    assert not np.array_equal(np.asarray(results[0]) == 0, np.asarray(results[1]) == 0)
