"""Per-example values returned from a strategy.function come back with each replica's real rows:
through experimental_local_results, in nested structures and as PerReplica outputs, for a padded
batch passed as an argument and for one taken with next(iterator) inside. Checked against
TensorFlow 2.21's recorded outputs (tests/data/tf/gaps.json, per_example_outputs_r3)."""
import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_names_this_line, here

import strategax as sx

REC = json.loads((pathlib.Path(__file__).parent / "data/tf/gaps.json").read_text())[
    "scenarios"]["per_example_outputs_r3"]["result"]


def numbers():
    """0..10 as float32 in global batches of 4, 4 and 3: rows 2/2/0, 2/2/0 and 1/1/1 on 3 replicas."""
    x = np.arange(11, dtype=np.float32)
    return [x[i:i + 4] for i in range(0, 11, 4)]


def same(got, rec):
    """`got` (arrays, tuples, lists, dicts, PerReplica) equals the recorded TensorFlow value."""
    if isinstance(rec, dict) and "type" in rec:
        assert isinstance(got, sx.PerReplica), got
        same(list(got.values), rec["values"])
    elif isinstance(rec, dict) and "dtype" in rec:
        got = np.asarray(got)
        assert got.shape == tuple(rec["shape"]) and got.dtype == np.dtype(rec["dtype"]), (got, rec)
        np.testing.assert_array_equal(got, np.asarray(rec["value"], rec["dtype"]).reshape(rec["shape"]))
    elif isinstance(rec, dict):
        assert sorted(got) == sorted(rec)
        for k in rec:
            same(got[k], rec[k])
    else:
        assert len(got) == len(rec), (got, rec)
        for g, r in zip(got, rec):
            same(g, r)


@pytest.fixture
def st():
    return sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])


def test_local_results_and_nested_outputs_of_a_batch_argument(st):
    # Intent: experimental_local_results of per-example values returned from the function, and
    # a nested structure of PerReplica per-example values and local results, give each replica
    # its real rows (an empty replica none), as TensorFlow does; one program serves all batches.
    local = st.function(lambda x: st.experimental_local_results(st.run(lambda v: v * 2, args=(x,))))
    nested = st.function(lambda x: {"a": st.run(lambda v: {"d": v * 2, "s": jnp.sum(v)}, args=(x,)),
                                    "b": [st.experimental_local_results(x)]})
    for k, batch in enumerate(st.experimental_distribute_dataset(numbers())):
        same(local(batch), REC["local"][k])
        same(nested(batch), REC["nested"][k])
    assert len(local._cache) == 1 and len(nested._cache) == 1


def test_per_example_outputs_of_a_batch_taken_inside(st):
    # Intent: a batch taken with next(iterator) inside the function: its per-example outputs
    # (local results, and a PerReplica) keep each replica's real rows of that batch, call by call.
    @st.function
    def taken(it):
        x = next(it)
        return st.experimental_local_results(st.run(lambda v: v + 1, args=(x,))), st.run(lambda v: v * 10, args=(x,))

    it = iter(st.experimental_distribute_dataset(numbers()))
    for k in range(3):
        same(taken(it), REC["taken"][k])


def test_local_results_used_inside_raise(st):
    # Intent: a local result of a per-example value has no static shape inside the program
    # (replicas hold different numbers of real rows): computing with it raises naming the line;
    # returning it is what works.
    @st.function
    def concat(x):
        parts = st.experimental_local_results(st.run(lambda v: v * 2, args=(x,)))
        line[0] = here() + 1
        return jnp.concatenate(parts)

    line = [0]
    batch = next(iter(st.experimental_distribute_dataset(numbers())))
    with pytest.raises(sx.DistributionValueError, match="local result of a per-example value used inside") as err:
        concat(batch)
    assert_names_this_line(err, line[0])
