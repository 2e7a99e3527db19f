"""Per-replica values whose shapes differ on any axis (issue 25, item 3), against TensorFlow 2.21's
recorded behaviour (tests/data/tf/ragged_shapes.json, tools/tf_record/record_ragged_shapes.py: every
case in its own process). `row` is (1, r+1)-shaped on replica r, `col` (r+1, 2), `widths` (2, w)
with w = 2, 3, 1 on 3 replicas (the first replica not the widest); the dataset deals [[0, 1]] and
then the wider [[10, 11, 12]] to replicas 0 and 1.

What holds, eagerly and inside compiled functions (each against TensorFlow's record of the same
mode): `gather` and `all_gather` along the differing axis concatenate the real extents,
`reduce(op, v, axis=k)`, `experimental_local_results` and replica functions give TensorFlow's
values (a compiled program takes such values padded to the largest extent, with the real
extents as inputs: trace/extents.py, passes/mask_padding/), and where TensorFlow refuses
(pieces that do not line up) strategax raises a named error naming the user's line."""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from conftest import assert_names_this_line, here

import strategax as sx
from test_tf_semantics import assert_tree

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/ragged_shapes.json").read_text())["scenarios"]


def recorded(name: str):
    return RECORDED[name]["result"]


def mirrored(n: int):
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])


def _row(r):
    return (jnp.arange(r + 1, dtype=jnp.float32) + 10.0 * r).reshape(1, r + 1)


def _col(r):
    return (jnp.arange(2 * (r + 1), dtype=jnp.float32) + 10.0 * r).reshape(r + 1, 2)


def _widths(r):
    w = (2, 3, 1)[r]
    return (jnp.arange(2 * w, dtype=jnp.float32) + 10.0 * r).reshape(2, w)


MAKERS = {"row": (_row, 2), "col": (_col, 2), "widths": (_widths, 3)}


def _value(kind):
    make, n = MAKERS[kind]
    strategy = mirrored(n)
    return strategy, strategy.experimental_distribute_values_from_function(
        lambda ctx: make(ctx.replica_id_in_sync_group)), n


def _calls(strategy, x):
    rc = sx.get_replica_context
    return {
        "local_results": lambda: list(strategy.experimental_local_results(x)),
        "gather_axis0": lambda: strategy.gather(x, axis=0),
        "gather_axis1": lambda: strategy.gather(x, axis=1),
        "gather_nested_axis0": lambda: strategy.gather({"a": x, "b": [x]}, axis=0),
        "gather_nested_axis1": lambda: strategy.gather({"a": x, "b": [x]}, axis=1),
        "reduce_sum_axis0": lambda: strategy.reduce("SUM", x, axis=0),
        "reduce_sum_axis1": lambda: strategy.reduce("SUM", x, axis=1),
        "reduce_mean_axis1": lambda: strategy.reduce("MEAN", x, axis=1),
        "all_gather_axis0": lambda: strategy.run(lambda v: rc().all_gather(v, axis=0), args=(x,)),
        "all_gather_axis1": lambda: strategy.run(lambda v: rc().all_gather(v, axis=1), args=(x,)),
        "all_gather_nested_axis0": lambda: strategy.run(
            lambda v: rc().all_gather({"a": v, "b": [v]}, axis=0), args=(x,)),
        "all_gather_nested_axis1": lambda: strategy.run(
            lambda v: rc().all_gather({"a": v, "b": [v]}, axis=1), args=(x,)),
        "run_times2": lambda: strategy.run(lambda v: v * 2.0, args=(x,)),
    }


def _cases(kind, predicate, mode="eager"):
    n = MAKERS[kind][1]
    return [name[len(kind) + 1:-len(f"_{mode}_r{n}")] for name in RECORDED
            if name.startswith(kind + "_") and name.endswith(f"_{mode}_r{n}") and predicate(recorded(name))]


def _answers(rec):
    return not (isinstance(rec, dict) and "error" in rec)


def _run(strategy, x, case, mode):
    """The case's call on `x`, eagerly or as the body of a compiled function."""
    if mode == "eager":
        return _calls(strategy, x)[case]()
    return strategy.function(lambda v: _calls(strategy, v)[case]())(x)


MODES = ("eager", "tf_function")
# TensorFlow answers, and strategax gives the same values (TensorFlow 2.21 hands back replica 0's
# value alone for a nested gather: test_gather_of_a_nested_structure)
ANSWERED = [(k, c, m) for m in MODES for k in MAKERS for c in _cases(k, _answers, m)
            if not c.startswith("gather_nested")]
# TensorFlow refuses: the pieces do not line up
REFUSED = [(k, c, m) for m in MODES for k in MAKERS for c in _cases(k, lambda r: not _answers(r), m)]


@pytest.mark.parametrize("kind,case,mode", ANSWERED)
def test_values_of_different_shapes_like_tensorflow(kind, case, mode):
    n = MAKERS[kind][1]
    strategy, x, _ = _value(kind)
    assert_tree(_run(strategy, x, case, mode), recorded(f"{kind}_{case}_{mode}_r{n}")["value"])


@pytest.mark.parametrize("kind,case,mode", REFUSED)
def test_where_tensorflow_refuses_a_named_error(kind, case, mode):
    strategy, x, _ = _value(kind)
    with pytest.raises(ValueError) as e:
        _run(strategy, x, case, mode)
    text = str(e.value)  # raised for the call in the lambda of `_calls`: its line is named
    assert isinstance(e.value, sx.errors.DistributionValueError) and "fix:" in text, text
    assert "test_ragged_shapes.py:" in text, text


@pytest.mark.parametrize("kind,axis", [("row", 1), ("col", 0)])
def test_gather_of_a_nested_structure(kind, axis):
    # TensorFlow 2.21 hands back replica 0's value alone for a nested structure (recorded, each
    # case in its own process); strategax concatenates every replica's, as TensorFlow does for one value.
    nested = recorded(f"{kind}_gather_nested_axis{axis}_eager_r2")["value"]
    assert nested["a"] == recorded(f"{kind}_local_results_eager_r2")["value"][0]
    single = recorded(f"{kind}_gather_axis{axis}_eager_r2")["value"]
    strategy, x, _ = _value(kind)
    assert_tree(_calls(strategy, x)[f"gather_nested_axis{axis}"](), {"a": single, "b": [single]})


def _wider_dataset(strategy):
    def dataset_fn(ctx):
        return [np.array([[0.0, 1.0]], np.float32), np.array([[10.0, 11.0, 12.0]], np.float32)]
    return strategy.distribute_datasets_from_function(dataset_fn)


WIDER = ["local_results", "gather_axis1", "reduce_sum_axis1", "gather_axis0", "all_gather_axis1", "run_times2"]


@pytest.mark.parametrize("what,mode", [(w, m) for m in MODES for w in WIDER])
def test_dataset_whose_second_element_is_wider(what, mode):
    # the crash this fixed: NumPy's "could not broadcast input array from shape (1,3) into shape (1,2)"
    recs = recorded(f"dataset_wider_{what}_{mode}_r2")
    strategy = mirrored(2)
    steps = list(_wider_dataset(strategy))
    assert len(steps) == len(recs) == 1
    rc = sx.get_replica_context
    call = {"local_results": lambda x: list(strategy.experimental_local_results(x)),
            "gather_axis1": lambda x: strategy.gather(x, axis=1),
            "reduce_sum_axis1": lambda x: strategy.reduce("SUM", x, axis=1),
            "gather_axis0": lambda x: strategy.gather(x, axis=0),
            "all_gather_axis1": lambda x: strategy.run(lambda v: rc().all_gather(v, axis=1), args=(x,)),
            "run_times2": lambda x: strategy.run(lambda v: v * 2.0, args=(x,))}[what]
    if mode == "tf_function":
        call = strategy.function(call)
    if _answers(recs[0]):
        assert_tree(call(steps[0]), recs[0]["value"])
        return
    with pytest.raises(ValueError) as e:
        call(steps[0])
    assert "do not line up" in str(e.value) and "fix:" in str(e.value)


@pytest.mark.parametrize("how", ["next", "for"])
def test_taking_elements_of_different_shapes_inside_a_function_names_the_call(how):
    # an element taken inside a compiled function is taken on the device, in one shape: the call
    # that would take one whose replicas' values differ in shape raises (a raw TypeError before)
    strategy = mirrored(2)
    dataset = _wider_dataset(strategy)
    assert dataset.element_spec.shape == (1, None)  # the width differs across replicas

    @strategy.function
    def step(data):
        if how == "next":
            return strategy.run(jnp.sum, args=(next(data),))
        total = 0.0
        for x in data:
            total += strategy.reduce("SUM", strategy.run(jnp.sum, args=(x,)), axis=None)
        return total
    line = here() + 2
    with pytest.raises(ValueError) as e:
        step(iter(dataset) if how == "next" else dataset)
    assert_names_this_line(e, line)
    assert "differ in shape" in str(e.value) and "for x in dist_dataset: step(x)" in str(e.value)


def test_values_whose_extents_agree_combine_entry_by_entry():
    # token ids and labels of one length per replica (3, 1, 2): their padded axes share one
    # hidden input, so the program may combine them; NumPy per replica is the reference
    strategy, lens = mirrored(3), [3, 1, 2]
    ids = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.arange(lens[ctx.replica_id_in_sync_group], dtype=np.float32).reshape(1, -1) + 1)
    labels = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.full((1, lens[ctx.replica_id_in_sync_group]), 2.0, np.float32))
    want = [np.arange(n, dtype=np.float32)[None] + 1 - 2.0 for n in lens]
    got = strategy.run(lambda a, b: a - b, args=(ids, labels))
    for g, w in zip(strategy.experimental_local_results(got), want):
        np.testing.assert_array_equal(np.asarray(g), w)
    mean = strategy.function(lambda a, b: strategy.reduce(
        "MEAN", strategy.run(lambda a, b: a - b, args=(a, b)), axis=1))
    np.testing.assert_allclose(np.asarray(mean(ids, labels)), [np.concatenate(want, axis=1).mean()], rtol=1e-6)
    other = strategy.experimental_distribute_values_from_function(  # lengths 1, 3, 2: they do not agree
        lambda ctx: np.ones((1, (1, 3, 2)[ctx.replica_id_in_sync_group]), np.float32))
    line = here() + 2
    with pytest.raises(ValueError) as e:
        strategy.run(lambda a, b: a - b, args=(ids, other))
    assert_names_this_line(e, line)
    assert "differ in shape across replicas" in str(e.value)


CALLS = {  # (per-replica function or cross-replica call, NumPy reference of the components)
    "sum_per_replica": (lambda s, v: s.run(lambda u: jnp.sum(u * u, axis=1), args=(v,)),
                        lambda cs: [np.sum(c * c, axis=1) for c in cs]),
    "mean_max": (lambda s, v: s.run(lambda u: jnp.mean(u, axis=1) + jnp.max(u, axis=1), args=(v,)),
                 lambda cs: [np.sum(c, axis=1) / c.shape[1] + np.max(c, axis=1, initial=-np.inf) for c in cs]),
    "softmax": (lambda s, v: s.run(lambda u: jax.nn.softmax(u, axis=1), args=(v,)),
                lambda cs: [np.exp(c - c.max(1, keepdims=True, initial=-np.inf))
                            / np.exp(c - c.max(1, keepdims=True, initial=-np.inf)).sum(1, keepdims=True) for c in cs]),
    "reduce_mean_axis1": (lambda s, v: s.reduce("MEAN", v, axis=1),
                          lambda cs: np.concatenate(cs, axis=1).mean(axis=1)),
    "gather_axis1": (lambda s, v: s.gather(v, axis=1), lambda cs: np.concatenate(cs, axis=1)),
    "all_gather_then_sum": (lambda s, v: s.run(
        lambda u: jnp.sum(sx.get_replica_context().all_gather(u, axis=1), axis=1), args=(v,)),
                            lambda cs: [np.concatenate(cs, axis=1).sum(axis=1)] * len(cs)),
}


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=3, max_size=3).filter(lambda w: len(set(w)) > 1),
       st.sampled_from(sorted(CALLS)), st.booleans())
def test_random_widths_like_numpy(widths, call, compiled):
    # any widths (an empty replica too) and any op: the padded entries never count
    strategy = mirrored(3)
    rng = np.random.default_rng(sum(widths))
    comps = [rng.normal(size=(2, w)).astype(np.float32) for w in widths]
    x = strategy.experimental_distribute_values_from_function(lambda ctx: comps[ctx.replica_id_in_sync_group])
    body, reference = CALLS[call]
    got = (strategy.function(lambda v: body(strategy, v)) if compiled else (lambda v: body(strategy, v)))(x)
    with np.errstate(invalid="ignore"):  # the mean of an empty replica: 0 / 0, NaN on both sides
        want = reference(comps)
    if isinstance(got, sx.DistributedValues):
        for g, w in zip(strategy.experimental_local_results(got), want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [2, 4])
def test_gather_of_a_captured_value_differing_on_axis0(n):
    # TensorFlow's testGatherDiffShapeAtAxis0 in a tf.function: the PerReplica is captured from
    # the enclosing scope, not passed; TF captures by value, so its components are constants.
    rec = json.loads((pathlib.Path(__file__).parent / "data/tf/trust.json").read_text())["scenarios"]
    want = rec[f"gather_diff_shape_axis0_captured_r{n}"]["result"]
    strategy = mirrored(n)
    ones = strategy.experimental_distribute_values_from_function(
        lambda c: jnp.ones((c.replica_id_in_sync_group + 1, 1), jnp.int32))
    floats = strategy.experimental_distribute_values_from_function(
        lambda c: (jnp.arange(c.replica_id_in_sync_group + 1, dtype=jnp.float32)
                   + 10.0 * c.replica_id_in_sync_group).reshape(-1, 1))
    calls = {"gather_ones": lambda: strategy.gather(ones, axis=0),
             "gather_floats": lambda: strategy.gather(floats, axis=0),
             "reduce_sum_floats": lambda: strategy.reduce("SUM", floats, axis=0),
             "reduce_mean_floats": lambda: strategy.reduce("MEAN", floats, axis=0)}
    for name, body in calls.items():
        assert_tree(strategy.function(body)(), want[name])
