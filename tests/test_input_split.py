"""strategax's input splitting against TensorFlow 2.21's recorded splits
(tests/data/tf/input_split.json, recorded by tools/tf_record/record_input_split.py).

TensorFlow's int64 data arrives as int32 here (JAX without x64), so int dtypes are compared
by value only.
"""
import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/input_split.json").read_text())["scenarios"]


def scenario(name):
    return RECORDED[name]["result"]


def data(kind):
    x1 = np.arange(10, dtype=np.float32)
    x2 = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.int32) * 10
    return {"arr1d": x1, "arr2d": x2, "tuple": (x2, y), "dict": {"a": x1, "b": x2}}[kind]


def batches(tree, size, drop_remainder=False):
    """What tf.data's `.batch(size)` yields, as NumPy pytrees."""
    n = len(_leaves(tree)[0])
    stop = n - n % size if drop_remainder else n
    return [_map(lambda x: x[i:i + size], tree) for i in range(0, stop, size)]


def _leaves(tree):
    if isinstance(tree, dict):
        return [v for k in sorted(tree) for v in _leaves(tree[k])]
    if isinstance(tree, tuple):
        return [v for t in tree for v in _leaves(t)]
    return [tree]


def _map(fn, tree):
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_map(fn, t) for t in tree)
    return fn(tree)


def assert_component(got, rec):
    want = np.asarray(rec["value"], dtype=rec["dtype"]).reshape(rec["shape"])
    got = np.asarray(got)
    assert got.shape == want.shape, (got, want)
    if want.dtype.kind == "f":
        assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def assert_element(strategy, element, rec):
    """`rec` mirrors the element's structure; at each leaf, the list of per-replica components."""
    if isinstance(rec, dict) and "dtype" not in rec:
        assert sorted(element) == sorted(rec)
        for k in rec:
            assert_element(strategy, element[k], rec[k])
    elif isinstance(rec, list) and rec and not isinstance(rec[0], dict):
        assert isinstance(element, tuple) and len(element) == len(rec)
        for e, r in zip(element, rec):
            assert_element(strategy, e, r)
    else:
        local = strategy.experimental_local_results(element)
        assert len(local) == len(rec)
        for got, r in zip(local, rec):
            assert_component(got, r)


def mirrored(n):
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])


DD = [k for k in RECORDED if k.startswith("dd_") and k.split("_")[1] in ("arr1d", "arr2d", "tuple", "dict")]


@pytest.mark.parametrize("name", DD)
def test_distribute_dataset_split_like_tf(name):
    # Intent: full, partial and empty-replica batches of arrays, tuples and dicts split as TF does.
    _, kind, b, r = name.split("_")
    rec = scenario(name)
    strategy = mirrored(int(r[1:]))
    dist = strategy.experimental_distribute_dataset(batches(data(kind), int(b[1:])))
    steps = list(dist)
    assert len(steps) == len(rec["steps"]) == len(rec["global_batch_sizes"])
    for element, want in zip(steps, rec["steps"]):
        assert_element(strategy, element, want)
    # element_spec: an unknown per-replica batch axis, the trailing shape and dtype
    spec = dist.element_spec
    leaves = _leaves(spec if not isinstance(spec, dict) else dict(spec))
    assert all(s.shape[0] is None for s in leaves)
    assert [s.shape[1:] for s in leaves] == [x.shape[1:] for x in _leaves(data(kind))]
    assert rec["element_spec"].count("TensorSpec(shape=(None,") == len(leaves) * int(r[1:])


@pytest.mark.parametrize("n", [2, 4])
def test_distribute_dataset_edge_cases_like_tf(n):
    rec = scenario(f"dd_extra_r{n}")
    strategy = mirrored(n)
    # batch(5, drop_remainder=True) through experimental_make_numpy_dataset
    numpy_ds = strategy.experimental_make_numpy_dataset(np.arange(10, dtype=np.float32))
    for element, want in zip(strategy.experimental_distribute_dataset(numpy_ds.batch(5, drop_remainder=True)),
                             rec["drop_remainder_b5"]["steps"], strict=True):
        assert_element(strategy, element, want)
    # range(3).batch(1): one replica gets the element, the others an empty batch
    for element, want in zip(strategy.experimental_distribute_dataset(batches(np.arange(3), 1)),
                             rec["range3_batch1"], strict=True):
        assert_element(strategy, element, want)
    # run on a partial step: the replica function's real rows (batch_mask) are TF's tf.shape(x)[0]
    dist = strategy.experimental_distribute_dataset(batches(np.arange(10, dtype=np.float32), 4))
    for x, want in zip(dist, rec["run_identity_range10_b4"], strict=True):
        out = strategy.run(lambda x: {"x": x, "size": jnp.sum(sx.nn.batch_mask(x)).astype(jnp.int32)}, args=(x,))
        assert_element(strategy, out, want)
    # summing reduce(SUM, x, axis=0) over the dataset
    total, count = 0.0, 0
    for x in dist:
        total, count = total + float(strategy.reduce("SUM", x, axis=0)), count + 1
    want_total, want_count = rec["sum_in_tf_function_range10_b4"]
    assert (total, count) == (want_total["value"], want_count["value"])
    # an unbatched dataset: TF fails (IndexError); strategax says what is wrong
    with pytest.raises(ValueError, match="leading batch axis"):
        next(iter(strategy.experimental_distribute_dataset(np.arange(4.0))))


DFFN = [k for k in RECORDED if k.startswith("dffn_range")]


def dffn_data(name):
    kind = name[len("dffn_"):name.rindex("_r")]
    if kind == "range5_unbatched":
        return list(np.arange(5))
    if kind == "range7_batch2_tuple":
        x = np.arange(7)
        return batches((x, 10 * x), 2)
    if kind == "range7_batch2_float_2d":
        return batches(np.arange(14, dtype=np.float32).reshape(7, 2), 2)
    size = int(kind.split("_")[0][len("range"):])
    return batches(np.arange(size), 2)


@pytest.mark.parametrize("name", DFFN)
def test_datasets_from_function_like_tf(name):
    # Intent: consecutive elements dealt to consecutive replicas; empty batches at the end.
    rec = scenario(name)
    strategy = mirrored(int(name.rsplit("_r", 1)[1]))
    contexts = []

    def dataset_fn(ctx):
        contexts.append(ctx)
        return dffn_data(name)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    steps = list(dist)
    assert len(steps) == len(rec["steps"])
    for element, want in zip(steps, rec["steps"]):
        assert_element(strategy, element, want)
    assert len(contexts) == 1 and contexts[0].num_replicas_in_sync == strategy.num_replicas_in_sync


@pytest.mark.parametrize("n", [1, 2, 4])
def test_input_context_like_tf(n):
    rec = scenario(f"dffn_input_context_r{n}")
    strategy = mirrored(n)
    seen = []

    def dataset_fn(ctx):
        seen.append(ctx)
        return batches(np.arange(7), 2)

    strategy.experimental_distribute_datasets_from_function(dataset_fn)
    (ctx,) = seen
    want = rec["contexts"][0]
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (
        want["num_input_pipelines"], want["input_pipeline_id"], want["num_replicas_in_sync"])
    for g in (8, 6, 7, 3, 1):
        w = want[f"get_per_replica_batch_size_{g}"]
        if isinstance(w, dict) and "error" in w:
            with pytest.raises(ValueError, match="not divisible"):
                ctx.get_per_replica_batch_size(g)
        else:
            assert ctx.get_per_replica_batch_size(g) == w


@pytest.mark.parametrize("n", [1, 2, 4])
def test_seed_example_datasets_from_function(n):
    # Intent: the seed's dataset_fn (per-replica batch from get_per_replica_batch_size).
    rec = scenario(f"dffn_seed_example_r{n}")
    strategy = mirrored(n)

    def dataset_fn(ctx):
        size = ctx.get_per_replica_batch_size(8)
        return (np.ones((size, 1, 1), np.float32) for _ in range(100))

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))
    for want in rec["steps"]:
        element = next(it)
        assert_element(strategy, element, want)
