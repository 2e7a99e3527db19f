"""Cache keys and retracing (issue 15): Python scalars keyed by type and value (-0.0, NaN);
eager run of a fresh lambda with the same code and captures reuses its program; eager
reduce/gather/batch_reduce_to/update/all_gather compile once; caches are LRU-bounded
(STRATEGAX_CACHE_SIZE); a function that keeps retracing logs tf.function's warning naming what
changed; reduce_retracing=True traces Python numbers as values. Numbers are checked against
plain JAX/NumPy and TensorFlow's recorded behaviour (tests/data/tf/retracing.json); programs
are counted where they are built (StrategyFunction._build)."""
import json
import logging
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from strategax.trace import function as function_module
from conftest import here

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/retracing.json").read_text())["scenarios"]
N = 4


@pytest.fixture
def builds(monkeypatch):
    """The number of programs built (traced, optimised, lowered) since the test began."""
    count = [0]
    original = function_module.StrategyFunction._build

    def counting(self, *args, **kwargs):
        count[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(function_module.StrategyFunction, "_build", counting)
    return count


def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def per_replica(st):
    """Replica i holds [i + 1, i + 2] (the recorded TensorFlow scenarios' input)."""
    return st.experimental_distribute_values_from_function(
        lambda ctx: jnp.array([ctx.replica_id_in_sync_group + 1.0, ctx.replica_id_in_sync_group + 2.0]))


def components():
    return [np.array([i + 1.0, i + 2.0], np.float32) for i in range(N)]


class Traces:
    """A trace counter a traced function can bump (a class: captured by identity, so it does
    not stop a fresh lambda from reusing its program)."""
    count = 0


# --- Python scalars in the cache key ---------------------------------------------------------
def test_negative_zero_and_zero_are_different_programs(builds):
    # Intent: f(x, 0.0) then f(x, -0.0) must not reuse the first program: 1/-0.0 is -inf in JAX.
    # TensorFlow reuses its trace here (recorded: one trace, +inf twice); strategax follows JAX.
    st = strategy()
    x = jnp.ones(3)
    f = st.function(lambda x, s: x / s)
    np.testing.assert_array_equal(f(x, 0.0), x / 0.0)
    np.testing.assert_array_equal(f(x, -0.0), x / -0.0)
    assert np.all(np.asarray(f(x, -0.0)) == -np.inf) and builds[0] == 2
    rec = RECORDED["signed_zero_r2"]["result"]
    assert rec["traces"] == 1 and rec["negative_zero"]["values"][0]["value"] == [np.inf, np.inf]
    # the same inside a pytree, and for a complex number's parts
    g = st.function(lambda x, d: x * d["c"].imag)
    np.testing.assert_array_equal(1 / g(x, {"c": complex(1, 0.0)}), 1 / (x * 0.0))
    np.testing.assert_array_equal(1 / g(x, {"c": complex(1, -0.0)}), 1 / (x * -0.0))


def test_nan_calls_hit_one_program(builds):
    # Intent: NaN != NaN must not make every call with a fresh float("nan") trace again.
    st = strategy()
    x = jnp.arange(3.0)
    f = st.function(lambda x, s: x + s)
    for _ in range(4):
        np.testing.assert_array_equal(f(x, float("nan")), x + np.nan)
    np.testing.assert_array_equal(f(x, 1.5), x + 1.5)
    assert builds[0] == 2 and len(f._cache) == 2


# --- eager run, reduce, gather: one program per signature -------------------------------------
def test_eager_run_of_a_fresh_lambda_reuses_its_program(builds):
    # Intent: a fresh lambda with the same code, defaults and captured values each call compiles
    # once (it compiled every call, ~150x slower, and kept every program).
    st = strategy()
    x, comps = per_replica(st), components()
    scale = 3.0

    def counted(v):  # a captured helper function: keyed by its own code and captures
        return jnp.asarray(v)

    for _ in range(4):
        out = st.run(lambda v, k=2.0: counted(v) * scale + k, args=(x,))
        for got, c in zip(out.values, comps):
            np.testing.assert_allclose(got, c * 3.0 + 2.0)
    assert builds[0] == 1 and len(st._eager_functions) == 1
    # a captured value, a default or a global that differs is another program, with its numbers
    out = st.run(lambda v, k=5.0: counted(v) * scale + k, args=(x,))
    np.testing.assert_allclose(out.values[2], comps[2] * 3.0 + 5.0)
    for scale in (0.0, -0.0):
        out = st.run(lambda v: counted(v) / scale, args=(x,))
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(out.values[1], comps[1] / np.float32(scale))
    assert builds[0] == 4


GLOBAL_SCALE = 2.0


def scaled(v):
    return v * GLOBAL_SCALE


class Settings:
    lr = 0.5


def test_eager_run_sees_new_globals_and_mutated_captures():
    # Intent: reuse never runs a program traced from stale state: a global a function reads,
    # and an attribute it names of a class or module, are part of the key; a captured mutable
    # object (a list, a NumPy array) keys the function by identity, so a fresh lambda traces
    # again and sees the new contents.
    global GLOBAL_SCALE
    st = strategy()
    x, comps = per_replica(st), components()
    try:
        for scale in (2.0, 7.0):
            GLOBAL_SCALE = scale
            out = st.run(lambda v: scaled(v) + 1.0, args=(x,))
            np.testing.assert_allclose(out.values[3], comps[3] * scale + 1.0)
    finally:
        GLOBAL_SCALE = 2.0
    for lr in (0.5, 0.25):  # a class attribute the function names is part of the key
        Settings.lr = lr
        out = st.run(lambda v: v * Settings.lr, args=(x,))
        np.testing.assert_allclose(out.values[2], comps[2] * lr)
    weights = np.array([1.0, 1.0], np.float32)
    for w in (1.0, 4.0):
        weights[:] = w
        out = st.run(lambda v: v * weights, args=(x,))
        np.testing.assert_allclose(out.values[0], comps[0] * w)


def test_eager_run_of_a_bound_method_compiles_once(builds):
    # Intent: `st.run(model.step)` makes a new bound method each time; it is one function.
    st = strategy()
    x, comps = per_replica(st), components()

    class Model:
        def __init__(self):
            self.w = np.float32(0.5)

        def step(self, v):
            return v * self.w

    model = Model()
    for _ in range(3):
        out = st.run(model.step, args=(x,))
    np.testing.assert_allclose(out.values[1], comps[1] * 0.5)
    assert builds[0] == 1


def test_eager_reduce_gather_batch_reduce_update_and_all_gather_compile_once(builds):
    # Intent: eager cross-replica calls (reduce, gather, batch_reduce_to, extended.update with a
    # PerReplica argument, a run) compile one program per signature, not one per call: three
    # identical calls of each leave one compiled function per call kind with one program each.
    st = strategy()
    x, comps = per_replica(st), components()
    total = np.sum(comps, axis=0)
    with st.scope():
        acc = sx.Variable(np.zeros(2, np.float32), synchronization=sx.VariableSynchronization.ON_READ,
                          aggregation=sx.VariableAggregation.SUM)
    for _ in range(3):
        np.testing.assert_allclose(st.reduce("SUM", x, axis=None), total)
        np.testing.assert_allclose(st.reduce("MEAN", x, axis=0), np.mean(np.concatenate(comps)))
        np.testing.assert_allclose(st.gather(x, 0), np.concatenate(comps))
        reduced, = st.extended.batch_reduce_to("SUM", [(x, None)])
        np.testing.assert_allclose(reduced.values[2], total)
        st.extended.update(acc, lambda var, v: var.assign_add(v), args=(x,))
        gathered = st.run(lambda v: sx.get_replica_context().all_gather(v, 0), args=(x,))
        np.testing.assert_allclose(gathered.values[3], np.concatenate(comps))
    np.testing.assert_allclose(np.stack([np.asarray(c) for c in acc.values]), 3 * np.stack(comps))
    assert builds[0] == 6
    assert len(st._eager_functions) == 6 and all(len(f._cache) == 1 for f in st._eager_functions.values())
    st.gather(per_replica_wide(st), 0)  # a new signature: one more program
    assert builds[0] == 7


def per_replica_wide(st):
    return st.experimental_distribute_values_from_function(lambda ctx: jnp.ones(3))


# --- bounded caches ----------------------------------------------------------------------------
def test_caches_keep_the_most_recently_used_programs(builds, monkeypatch):
    # Intent: STRATEGAX_CACHE_SIZE bounds each function's programs and each strategy's eager
    # run functions; the least recently used goes, and a call of it compiles it again.
    monkeypatch.setenv("STRATEGAX_CACHE_SIZE", "2")
    st = strategy()
    x = jnp.arange(4.0)
    f = st.function(lambda x, s: x * s)
    for s in (1.0, 2.0, 1.0, 3.0):  # 2.0 is the least recently used when 3.0 arrives
        np.testing.assert_allclose(f(x, s), x * s)
    assert builds[0] == 3 and len(f._cache) == 2
    np.testing.assert_allclose(f(x, 1.0), x)  # kept
    assert builds[0] == 3
    np.testing.assert_allclose(f(x, 2.0), x * 2.0)  # evicted: compiled again
    assert builds[0] == 4 and len(f._cache) == 2
    v, comps = per_replica(st), components()
    for k in range(3):
        out = st.run(lambda t, k=float(k): t + k, args=(v,))
        np.testing.assert_allclose(out.values[0], comps[0] + k)
    assert len(st._eager_functions) == 2


def test_a_bad_cache_size_is_a_located_error(monkeypatch):
    monkeypatch.setenv("STRATEGAX_CACHE_SIZE", "lots")
    with pytest.raises(sx.DistributionValueError) as err:
        strategy().function(lambda x: x)
    assert "STRATEGAX_CACHE_SIZE" in str(err.value) and "fix:" in str(err.value)


# --- the retracing warning -------------------------------------------------------------------
def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "retracing" in r.getMessage()]


def test_retracing_warning_comes_where_tensorflow_warns_and_names_the_argument(caplog):
    # Intent: a Python-float learning rate that changes every call retraces every call; as in
    # TensorFlow (recorded) the 5th and 6th calls warn "N out of the last N calls ...", and the
    # warning names the argument and its old and new values.
    st = strategy()
    x, comps = per_replica(st), components()
    rec = RECORDED["float_schedule_r2"]["result"]

    def step(x, lr):
        return st.run(lambda v: v * lr, args=(x,))

    f = st.function(step)
    per_call = []
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for lr in rec["rates"]:
            before = len(warnings_of(caplog))
            out = f(x, lr)
            np.testing.assert_allclose(out.values[1], comps[1] * np.float32(lr), rtol=1e-6)
            per_call.append(warnings_of(caplog)[before:])
    ours = [[re.match(r"\d+ out of the last \d+ calls", m).group(0) for m in w] for w in per_call]
    theirs = [[re.match(r"\d+ out of the last \d+ calls", m).group(0) for m in c["warnings"]] for c in rec["calls"]]
    assert ours == theirs == [[], [], [], [], ["5 out of the last 5 calls"], ["6 out of the last 6 calls"], [], []]
    text = per_call[4][0]
    assert "calls to step (" in text and "triggered retracing" in text
    assert "argument `lr` (a Python float 0.5, was a Python float 0.4)" in text
    assert "reduce_retracing=True" in text and "fix:" in text


def test_retracing_warning_names_a_changing_shape_inside_a_pytree(caplog):
    st = strategy()
    f = st.function(lambda params, batch: params["w"] * jnp.sum(batch["x"]))
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for rows in range(1, 6):
            out = f({"w": jnp.float32(2.0)}, {"x": jnp.ones(rows)})
            np.testing.assert_allclose(out, 2.0 * rows)
    text, = warnings_of(caplog)
    assert "argument `batch['x']` (an array float32[5], was an array float32[4])" in text
    assert "pad or bucket" in text


def test_retracing_warning_names_a_changing_captured_value_of_an_eager_run(caplog):
    st = strategy()
    x, comps = per_replica(st), components()
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for lr in (0.5, 0.25, 0.125, 2.0, 4.0):
            out = st.run(lambda v: v * lr, args=(x,))
            np.testing.assert_allclose(out.values[0], comps[0] * lr)
    text, = warnings_of(caplog)
    assert "the captured value `lr` (a Python float 4.0, was a Python float 2.0)" in text


def test_a_fresh_lambda_reading_a_mutable_object_is_named(caplog):
    st = strategy()
    x, comps = per_replica(st), components()
    weights = [np.float32(1.0)]  # a list: mutable, so each fresh lambda traces again
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for w in range(5):
            weights[0] = np.float32(w)
            out = st.run(lambda v: v * weights[0], args=(x,))
            np.testing.assert_allclose(out.values[1], comps[1] * w)
    text, = warnings_of(caplog)
    assert "reads the captured value `weights`" in text and "define the function once" in text


def test_a_program_keeps_the_numpy_values_it_was_traced_with():
    # Intent: a captured NumPy array changed in place after tracing does not change the program's
    # IR (which f.ir, the dump, export and the round-trip check read): its constant is a copy,
    # as the executable's is. (The IR once aliased the user's array.)
    st = strategy()
    x = jnp.arange(3.0)
    weights = np.zeros(3, np.float32)
    f = st.function(lambda v: v * weights + 1.0)
    np.testing.assert_allclose(f(x), np.asarray(x) * 0.0 + 1.0)
    before = f.ir(x)
    weights[:] = 5.0
    np.testing.assert_allclose(f(x), np.asarray(x) * 0.0 + 1.0)  # traced once, as jax.jit bakes it
    assert f.ir(x) == before
    g = st.function(lambda v: v * weights + 1.0)  # a new function sees the new values
    np.testing.assert_allclose(g(x), np.asarray(x) * 5.0 + 1.0)


def test_a_new_strategy_function_per_call_is_caught(caplog):
    # Intent: as TensorFlow counts calls per Python function, a strategy.function made anew in
    # a loop warns although each one traced only once.
    st = strategy()
    x = jnp.ones(2)

    def body(x):
        return x + 1.0

    with caplog.at_level(logging.WARNING, logger="strategax"):
        for _ in range(5):
            np.testing.assert_allclose(st.function(body)(x), x + 1.0)
    text, = warnings_of(caplog)
    assert "nothing in the arguments" in text and "outside the loop" in text


class _Tag:
    """Auxiliary data that prints alike and compares by identity (as a layer's config object may)."""

    def __repr__(self):
        return "tag"


@jax.tree_util.register_pytree_node_class
class _Box:
    def __init__(self, x, tag):
        self.x, self.tag = x, tag

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, children):
        return cls(children[0], tag)


def test_functions_made_by_one_factory_are_named_as_such_not_as_a_changed_structure(caplog):
    # Intent: two traces whose argument structures print alike are not described as "the
    # structure changed" with the same text twice: made by another compiled function, the
    # warning says so; by the same function, it names the unequal node data.
    st = strategy()
    x = jnp.ones(2)

    def body(box):
        return box.x + 1.0

    with caplog.at_level(logging.WARNING, logger="strategax"):
        for _ in range(5):
            np.testing.assert_allclose(st.function(body)(_Box(x, _Tag())), np.ones(2) + 1.0)
    text, = warnings_of(caplog)
    assert "another compiled function of the same Python function" in text and "was" not in text.split("fix:")[0]

    def other(box):
        return box.x * 2.0

    f = st.function(other)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for _ in range(5):
            np.testing.assert_allclose(f(_Box(x, _Tag())), np.ones(2) * 2.0)
    text, = warnings_of(caplog)
    assert "the same nesting" in text and "unequal node types or data" in text and "define namedtuples" in text


# --- reduce_retracing ------------------------------------------------------------------------
def test_reduce_retracing_traces_a_learning_rate_schedule_once(builds, caplog):
    # Intent: with reduce_retracing=True Python ints and floats are traced inputs: one program
    # for the whole schedule, each step's numbers right (TensorFlow's reduce_retracing still
    # traces per float, recorded; strategax goes further, as jax.jit does).
    st = strategy()
    x, comps = per_replica(st), components()
    rec = RECORDED["float_schedule_reduce_retracing_r2"]["result"]
    assert rec["traced_at_calls"] == list(range(len(rec["rates"])))
    Traces.count = 0

    def step(x, lr, k):
        Traces.count += 1
        return st.run(lambda v: v * lr + k, args=(x,))

    f = st.function(step, reduce_retracing=True)
    with caplog.at_level(logging.WARNING, logger="strategax"):
        for k, lr in enumerate(rec["rates"]):
            out = f(x, lr, k)
            np.testing.assert_allclose(out.values[3], comps[3] * np.float32(lr) + k, rtol=1e-6)
    assert Traces.count == 1 and builds[0] == 1 and not warnings_of(caplog)
    exported = f.export(x, 0.5, 3, platforms=("tpu",))  # the number is an input of the program
    assert len(exported.in_avals) == 3 and exported.in_avals[1].shape == () and Traces.count == 1


def test_reduce_retracing_keeps_jax_jit_dtypes_and_bools_static(builds):
    # Intent: a traced Python number is weakly typed as under jax.jit (bfloat16 * 0.5 stays
    # bfloat16); a bool stays a constant so it can pick a Python branch.
    st = strategy()
    x = jnp.arange(4, dtype=jnp.bfloat16)

    def f(x, scale, flip):
        return -x * scale if flip else x * scale

    compiled = st.function(f, reduce_retracing=True)
    for scale, flip in ((0.5, False), (0.25, True), (2, False)):
        got, want = compiled(x, scale, flip), jax.jit(f, static_argnums=2)(x, scale, flip)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
    assert builds[0] == 3  # (float, False), (float, True), (int, False): the bool is in the key


def test_a_traced_number_used_as_a_python_value_is_a_located_error():
    # Intent: reduce_retracing traces `n`; slicing with it needs a concrete value: the error
    # names the argument and the user's line, not a JAX tracer error from inside JAX.
    st = strategy()

    def head(x, n):
        return x[:n]  # the line the error names
    line = here() - 1

    with pytest.raises(sx.DistributionTypeError) as err:
        st.function(head, reduce_retracing=True)(jnp.arange(5.0), 2)
    text = str(err.value)
    assert f"test_retracing.py:{line}:" in text and "`n`" in text and "fix:" in text
    np.testing.assert_allclose(st.function(head)(jnp.arange(5.0), 2), np.arange(2.0))
