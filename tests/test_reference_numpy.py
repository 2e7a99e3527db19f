"""The reference interpreter's NumPy rules (strategax/backends/reference_numpy.py) against eager
JAX: every equation of each case's jaxpr whose primitive has a rule is computed both ways on the
same inputs (NaN, infinities, bfloat16, out-of-range dynamic indices among them), and must give
the same shape and dtype and the same values (exactly for integers and booleans, within a few
float32 roundings otherwise). The cases a rule declines (eager JAX computes them) are the
documented ones."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend import core as jex

from strategax.backends.reference_numpy import NUMPY_RULES, apply_rule

R = np.random.default_rng(0)
F = R.normal(size=(3, 4)).astype(np.float32)
G = R.normal(size=(3, 4)).astype(np.float32) + 0.5
POS = np.abs(F) + 0.1
SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0], [-0.0, 1.0, -2.5, 1e-30], [3.0, np.nan, 7.0, -1.0]], np.float32)
B16 = F.astype(jnp.bfloat16)
INTS = R.integers(-50, 50, size=(3, 4)).astype(np.int32)
MASK = F > 0


def dyn_slice(x, i, j):  # the primitive itself: jnp's indexing would wrap negative indices first
    return lax.dynamic_slice_p.bind(x, i, j, slice_sizes=(2, 3))


def dyn_update(x, u, i, j):
    return lax.dynamic_update_slice_p.bind(x, u, i, j)


CASES = {
    "float arithmetic": (lambda x, y: [x + y, x - y, x * y, x / y, -x, jnp.maximum(x, y), jnp.minimum(x, y),
                                       x ** 3, x ** -2, lax.integer_pow(x.astype(jnp.bfloat16), 2), jnp.square(x),
                                       jnp.abs(x), jnp.sign(x), x ** y], (F, G)),
    "transcendental": (lambda x: [jnp.exp(x), jnp.log(x), jnp.tanh(x), jnp.sqrt(x), lax.rsqrt(x), jnp.log1p(x),
                                  jnp.expm1(x), jnp.exp2(x), jax.nn.sigmoid(x), jnp.sin(x), jnp.cos(x),
                                  jnp.floor(x * 3), jnp.ceil(x * 3)], (POS,)),
    "specials": (lambda x: [jnp.isfinite(x), x == x[::-1], x != 0, x < 1, x <= 1, x > 1, x >= 1, lax.max(x, 2.0),
                            lax.min(x, 2.0), jnp.exp(x), x.sum(1), lax.reduce_max_p.bind(x, axes=(0,)),
                            lax.reduce_min_p.bind(x, axes=(1,)), x.astype(bool)], (SPECIAL,)),
    "bfloat16": (lambda x, y: [x * y + x, x / y, jnp.exp(x), jnp.tanh(x), jnp.maximum(x, y), x > y,
                               x.astype(jnp.float32), (x * 3).astype(jnp.float32).astype(jnp.bfloat16),
                               jnp.where(x > 0, x, y)], (B16, G.astype(jnp.bfloat16))),
    "integers": (lambda i, j: [i + j, i - j, i * j, -i, jnp.abs(i), jnp.maximum(i, j), jnp.minimum(i, j),
                               i == j, i < j, i & j, i | j, i ^ j, ~i, i.sum(0), i.max(1), i.min(0),
                               i.astype(jnp.float32), i.astype(bool), i.astype(jnp.int8),
                               jnp.int32(2 ** 30) * i], (INTS, INTS[::-1])),
    "booleans": (lambda m, n: [m & n, m | n, m ^ n, ~m, m.astype(jnp.float32), m.astype(jnp.int32), m == n],
                 (MASK, MASK[::-1])),
    "select": (lambda m, i, x, y: [jnp.where(m, x, y), lax.select_n(i, x, y, x * 2),
                                   lax.select_n(np.bool_(True), x, y)], (MASK, np.abs(INTS) % 3, F, G)),
    "gradient": (lambda x: [jax.grad(lambda v: jnp.sum(jnp.sin(v) * v))(x)], (F,)),  # add_any
    "reductions": (lambda x: [x.sum(), x.sum(0), x.sum((0, 1)), x.max(1), x.min(), x.mean(0)], (F,)),
    "dot_general": (lambda x, y, z: [x @ y.T, x.T @ y, jnp.einsum("bij,bjk->bik", z, z.transpose(0, 2, 1)),
                                     jnp.einsum("bij,jb->ib", z, y.T[:, :2]), jnp.dot(x[0], y[0]),
                                     lax.dot_general(x, y, (((1,), (1,)), ((), ())),
                                                     preferred_element_type=jnp.float32)],
                    (F, G, R.normal(size=(2, 3, 4)).astype(np.float32))),
    "shapes": (lambda x, y: [jnp.broadcast_to(x[:, None, :], (3, 5, 4)), x.reshape(4, 3), x.reshape(12),
                             x.T, x[None].squeeze(0), jnp.stack([x, y], 1), jnp.concatenate([x, y], 0),
                             x[1:3, ::2], lax.slice(x, (0, 1), (3, 4), (2, 1)), jnp.arange(7) * 2,
                             lax.broadcasted_iota(jnp.int32, (3, 4), 1), jnp.zeros((2, 3)) + x[0, :3],
                             jnp.float32(2.0) * x], (F, G)),
    "dynamic": (lambda x, u, i, j, k: [dyn_slice(x, i, j), dyn_slice(x, j, k), dyn_slice(x, k, i),
                                       dyn_update(x, u, i, j), dyn_update(x, u, k, k), dyn_update(x, u, j, i)],
                (R.normal(size=(5, 6)).astype(np.float32), R.normal(size=(2, 3)).astype(np.float32),
                 np.int32(1), np.int32(-4), np.int32(99))),
}

# cases a rule declines on purpose (eager JAX computes them: their semantics differ in NumPy):
# a half-float reduction (XLA accumulates in the half type), float to int (XLA saturates, NaN
# to 0), integer division (XLA truncates; NumPy floors)
DECLINED = {"fallbacks": (lambda b, x, i: [lax.reduce_sum_p.bind(b, axes=(0,), out_sharding=None), b.max(1),
                                            x.astype(jnp.int32), b.astype(jnp.int32), lax.div(i, 3)], (B16, F, INTS))}
CASES.update(DECLINED)


def eager_and_numpy(fn, inputs):
    """(primitive name, eager JAX results, NumPy rule's results or None) for each equation with a
    rule, the equations (inside inner jits too) evaluated in order on eager JAX's values."""
    closed = jax.make_jaxpr(fn)(*inputs)
    found = []
    evaluate(closed.jaxpr, closed.consts, [np.asarray(x) for x in inputs], found)
    return found


def evaluate(jaxpr, consts, args, found):
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(a):
        return np.asarray(a.val) if isinstance(a, jex.Literal) else env[a]

    for eqn in jaxpr.eqns:
        ins = [read(a) for a in eqn.invars]
        if eqn.primitive.name in ("jit", "pjit"):
            inner = eqn.params["jaxpr"]
            outs = evaluate(inner.jaxpr, inner.consts, ins, found)
        else:
            outs = eqn.primitive.bind(*ins, **eqn.params)
            outs = [np.asarray(o) for o in (outs if eqn.primitive.multiple_results else [outs])]
            if eqn.primitive.name in NUMPY_RULES:
                found.append((eqn.primitive.name, outs,
                              apply_rule(eqn.primitive.name, eqn.params, ins, [v.aval for v in eqn.outvars])))
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


@pytest.mark.parametrize("case", sorted(CASES))
def test_numpy_rules_equal_eager_jax(case):
    fn, inputs = CASES[case]
    found = eager_and_numpy(fn, inputs)
    assert found, case
    for name, want, got in found:
        if got is None:
            continue
        assert len(got) == len(want), name
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, g.dtype, w.shape, w.dtype)
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w, err_msg=name)
            else:
                half = w.dtype.itemsize == 2
                np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                           rtol=2 ** -8 if half else 4e-6, atol=0 if half else 1e-6, err_msg=name)


def test_every_rule_is_checked_and_declines_only_what_it_says():
    """Each rule computed some equation above (a new rule needs a case), no rule declined an
    equation outside DECLINED, and each of DECLINED's was declined (eager JAX computes it)."""
    ran, declined = set(), []
    for case, (fn, inputs) in CASES.items():
        for name, _, got in eager_and_numpy(fn, inputs):
            if got is None:
                declined.append((case, name))
            else:
                ran.add(name)
    assert ran == set(NUMPY_RULES), set(NUMPY_RULES) - ran
    assert declined == [("fallbacks", "reduce_sum"), ("fallbacks", "reduce_max"),
                        ("fallbacks", "convert_element_type"), ("fallbacks", "convert_element_type"),
                        ("fallbacks", "div")], declined
