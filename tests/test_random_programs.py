"""Random small replica programs: strategax on 4 replicas against a NumPy evaluation that
loops over the replicas by hand (an independent reference for locality and collectives)."""
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import strategax as sx

N = 4
STRATEGY = None

# Each step reads one or two earlier values (by index) and appends one new value.
UNARY = {"sin": (jnp.sin, np.sin), "neg": (jnp.negative, np.negative), "tanh": (jnp.tanh, np.tanh)}
BINARY = {"add": (jnp.add, np.add), "mul": (jnp.multiply, np.multiply), "sub": (jnp.subtract, np.subtract)}
COLLECTIVE = ("all_reduce_sum", "all_reduce_mean", "replica_id_scale")

step = st.one_of(
    st.tuples(st.sampled_from(sorted(UNARY)), st.integers(0, 20)),
    st.tuples(st.sampled_from(sorted(BINARY)), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.sampled_from(COLLECTIVE), st.integers(0, 20)),
)


def run_strategax(steps, x):
    def replica_fn(x):
        ctx = sx.get_replica_context()
        vals = [x, x * 0.5 + 1.0]
        for s in steps:
            a = vals[s[1] % len(vals)]
            if s[0] in UNARY:
                vals.append(UNARY[s[0]][0](a))
            elif s[0] in BINARY:
                vals.append(BINARY[s[0]][0](a, vals[s[2] % len(vals)]))
            elif s[0] == "all_reduce_sum":
                vals.append(ctx.all_reduce("sum", a))
            elif s[0] == "all_reduce_mean":
                vals.append(ctx.all_reduce("mean", a))
            else:
                vals.append(a * (ctx.replica_id_in_sync_group.astype(jnp.float32) + 1.0))
        return vals[-1]
    return STRATEGY.experimental_local_results(STRATEGY.run(replica_fn, args=(x,)))


def run_numpy(steps, comps):
    vals = [list(comps), [c * 0.5 + 1.0 for c in comps]]
    for s in steps:
        a = vals[s[1] % len(vals)]
        if s[0] in UNARY:
            vals.append([UNARY[s[0]][1](v) for v in a])
        elif s[0] in BINARY:
            b = vals[s[2] % len(vals)]
            vals.append([BINARY[s[0]][1](u, v) for u, v in zip(a, b)])
        elif s[0] == "all_reduce_sum":
            vals.append([np.sum(a, axis=0)] * N)
        elif s[0] == "all_reduce_mean":
            vals.append([np.mean(a, axis=0)] * N)
        else:
            vals.append([v * (r + 1.0) for r, v in enumerate(a)])
    return vals[-1]


@settings(max_examples=25, deadline=None)
@given(st.lists(step, min_size=1, max_size=8))
def test_random_program_matches_numpy(steps):
    global STRATEGY
    STRATEGY = STRATEGY or sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])
    comps = [np.linspace(-1.0, 1.0, 3).astype(np.float32) * (r + 1) for r in range(N)]
    x = STRATEGY.experimental_distribute_values_from_function(lambda ctx: comps[ctx.replica_id_in_sync_group])
    got = run_strategax(steps, x)
    want = run_numpy(steps, comps)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w, np.float32), rtol=1e-4, atol=1e-4)
