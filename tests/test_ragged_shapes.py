"""Per-replica values whose shapes differ on any axis (issue 25, item 3), against TensorFlow 2.21's
recorded behaviour (tests/data/tf/ragged_shapes.json, tools/tf_record/record_ragged_shapes.py: every
case in its own process). `row` is (1, r+1)-shaped on replica r, `col` (r+1, 2), `widths` (2, w)
with w = 2, 3, 1 on 3 replicas (the first replica not the widest); the dataset deals [[0, 1]] and
then the wider [[10, 11, 12]] to replicas 0 and 1.

What holds: outside compiled functions `gather` along the differing axis concatenates the real
extents, `reduce(op, v, axis=k)` and `experimental_local_results` give TensorFlow's values, and
where TensorFlow refuses (pieces that do not line up) strategax raises a named error. What
strategax does not do (docs/porting.md): run a replica function, or a compiled function, on
such values when they differ off axis 0 (TensorFlow runs each replica on its own shape): it
raises a named error with the user's line and the fix, never a wrong answer."""
import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_names_this_line, here

import strategax as sx
from test_tf_semantics import assert_local_results, assert_tree

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


def _cases(kind, predicate):
    n = MAKERS[kind][1]
    return [name[len(kind) + 1:-len(f"_eager_r{n}")] for name in RECORDED
            if name.startswith(kind + "_") and name.endswith(f"_eager_r{n}") and predicate(recorded(name))]


def _answers(rec):
    return not (isinstance(rec, dict) and "error" in rec)


# TensorFlow answers, and strategax gives the same values outside compiled functions
HOST = [(k, c) for k in MAKERS for c in _cases(k, _answers)
        if not c.startswith(("all_gather", "gather_nested")) and not (c == "run_times2" and k != "col")]
# TensorFlow refuses: the pieces do not line up
REFUSED = [(k, c) for k in MAKERS for c in _cases(k, lambda r: not _answers(r))]


@pytest.mark.parametrize("kind,case", HOST)
def test_values_of_different_shapes_like_tensorflow(kind, case):
    n = MAKERS[kind][1]
    rec = recorded(f"{kind}_{case}_eager_r{n}")
    strategy, x, _ = _value(kind)
    got = _calls(strategy, x)[case]()
    if case == "run_times2":  # differing along axis 0 only: strategy.run pads the rows
        assert_local_results(strategy, got, rec["value"]["values"])
    else:
        assert_tree(got, rec["value"])


@pytest.mark.parametrize("kind,case", REFUSED)
def test_where_tensorflow_refuses_a_named_error(kind, case):
    strategy, x, _ = _value(kind)
    with pytest.raises(ValueError) as e:
        _calls(strategy, x)[case]()
    text = str(e.value)  # raised in the lambda of `_calls`: its line is named
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


def test_gather_along_the_differing_axis_in_tensorflow_also_in_a_function():
    rec = recorded("row_gather_axis1_tf_function_r2")
    assert rec == recorded("row_gather_axis1_eager_r2")
    np.testing.assert_array_equal(rec["value"]["value"], [[0.0, 10.0, 11.0]])


# TensorFlow answers; strategax raises a named error (a difference listed in docs/porting.md)
UNSUPPORTED = [(k, c) for k in MAKERS for c in _cases(k, _answers)
               if c.startswith("all_gather") or (c == "run_times2" and k != "col")]


@pytest.mark.parametrize("kind,case", UNSUPPORTED)
def test_replica_functions_on_values_of_different_shapes_raise_a_named_error(kind, case):
    strategy, x, _ = _value(kind)
    with pytest.raises(ValueError) as e:
        _calls(strategy, x)[case]()
    text = str(e.value)
    assert isinstance(e.value, sx.errors.DistributionValueError) and "fix:" in text, text
    assert "test_ragged_shapes.py:" in text and ("pad" in text or "gather" in text), text


@pytest.mark.parametrize("api", ["gather", "local_results", "all_gather"])
def test_compiled_function_of_values_of_different_shapes_names_the_axis(api):
    assert _answers(recorded("row_gather_axis1_tf_function_r2"))
    strategy, x, _ = _value("row")
    body = {"gather": lambda v: strategy.gather(v, axis=1),
            "local_results": lambda v: strategy.experimental_local_results(v),
            "all_gather": lambda v: strategy.run(lambda u: sx.get_replica_context().all_gather(u, axis=1),
                                                 args=(v,))}[api]
    f = strategy.function(body)
    line = here() + 2
    with pytest.raises(ValueError) as e:
        f(x)
    assert_names_this_line(e, line)
    assert "along axis 1" in str(e.value) and "strategy.gather(v, axis=k)" in str(e.value)


def _wider_dataset(strategy):
    def dataset_fn(ctx):
        return [np.array([[0.0, 1.0]], np.float32), np.array([[10.0, 11.0, 12.0]], np.float32)]
    return strategy.distribute_datasets_from_function(dataset_fn)


@pytest.mark.parametrize("what", ["local_results", "gather_axis1", "reduce_sum_axis1", "gather_axis0"])
def test_dataset_whose_second_element_is_wider(what):
    # the crash this fixes: NumPy's "could not broadcast input array from shape (1,3) into shape (1,2)"
    recs = recorded(f"dataset_wider_{what}_eager_r2")
    strategy = mirrored(2)
    steps = list(_wider_dataset(strategy))
    assert len(steps) == len(recs) == 1
    call = {"local_results": lambda x: list(strategy.experimental_local_results(x)),
            "gather_axis1": lambda x: strategy.gather(x, axis=1),
            "reduce_sum_axis1": lambda x: strategy.reduce("SUM", x, axis=1),
            "gather_axis0": lambda x: strategy.gather(x, axis=0)}[what]
    if _answers(recs[0]):
        assert_tree(call(steps[0]), recs[0]["value"])
        return
    with pytest.raises(ValueError) as e:
        call(steps[0])
    assert "do not line up" in str(e.value) and "fix:" in str(e.value)


def test_dataset_whose_second_element_is_wider_in_a_replica_function():
    assert _answers(recorded("dataset_wider_all_gather_axis1_eager_r2")[0])
    strategy = mirrored(2)
    (x,) = list(_wider_dataset(strategy))
    line = here() + 2
    with pytest.raises(ValueError) as e:
        strategy.run(lambda v: sx.get_replica_context().all_gather(v, axis=1), args=(x,))
    assert_names_this_line(e, line)
    f = strategy.function(lambda v: strategy.gather(v, axis=1))
    line = here() + 2
    with pytest.raises(ValueError) as e:
        f(x)
    assert_names_this_line(e, line)
