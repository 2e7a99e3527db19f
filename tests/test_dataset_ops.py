"""`sx.data.Dataset`'s tf.data methods for Keras and its tutorials (issue 34): `unbatch`, `cache`,
`prefetch`, `skip`, `filter`, `take(-1)`, `with_options`/`options`, the constants, and
`cardinality()` with TensorFlow's unknown (-2). References: TensorFlow 2.21 recorded by
tools/tf_record/record_dataset_ops.py (tests/data/tf/dataset_ops.json), each chain run here as
recorded with `tf.data.Dataset.range(n)` spelt as the rows of `np.arange(n)`."""
import json
from pathlib import Path

import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here
from strategax.input.options import InputOptions
from strategax.input.shard import dataset_policy

TF = json.loads((Path(__file__).parent / "data/tf/dataset_ops.json").read_text())["scenarios"]
OPS = TF["ops_r1"]["result"]


class _Ns:
    """`tf` for the recorded expressions: tf.data.Dataset.range(n) and tf.data.AUTOTUNE in sx.data."""

    class data:  # noqa: N801 - spelt as TensorFlow's module
        AUTOTUNE = sx.data.AUTOTUNE

        class Dataset:
            @staticmethod
            def range(n):
                return sx.data.Dataset.from_tensor_slices(np.arange(n))

            from_tensor_slices = staticmethod(sx.data.Dataset.from_tensor_slices)


def run(expression: str):
    """The recorded TensorFlow expression, built with sx.data."""
    return eval(expression, {"tf": _Ns, "np": np})


def plain(element):
    """An element as the recording writes it (values only)."""
    if isinstance(element, dict):
        return {k: plain(v) for k, v in element.items()}
    if isinstance(element, (tuple, list)):
        return [plain(e) for e in element]
    return np.asarray(element).tolist()


def recorded(element):
    if isinstance(element, dict) and "value" in element:
        return element["value"]
    if isinstance(element, dict):
        return {k: recorded(v) for k, v in element.items()}
    if isinstance(element, list):
        return [recorded(e) for e in element]
    return element


@pytest.mark.parametrize("name", sorted(k for k, v in OPS.items() if isinstance(v, dict) and "elements" in v))
def test_elements_and_cardinality_are_tensorflows(name):
    # Intent: unbatch, skip, filter, prefetch and cache yield TensorFlow's elements in its order,
    # with its cardinality (unknown, -2, after unbatch and filter).
    tf = OPS[name]
    ds = run(tf["dataset"])
    assert [plain(e) for e in ds] == [recorded(e) for e in tf["elements"]], name
    assert [plain(e) for e in ds] == [recorded(e) for e in tf["elements"]], name  # a second pass
    assert ds.cardinality() == tf["cardinality"]


def test_cardinality_of_chains_is_tensorflows():
    # Intent: unknown and infinite lengths propagate through batch/take/repeat/shard/skip/shuffle/
    # map/cache/prefetch/unbatch exactly as tf.data's cardinality() reports them.
    for expression, want in OPS["cardinality"].items():
        assert run(expression).cardinality() == want, expression
    assert (sx.data.AUTOTUNE, sx.data.INFINITE_CARDINALITY, sx.data.UNKNOWN_CARDINALITY) == (
        OPS["constants"]["AUTOTUNE"], OPS["constants"]["INFINITE_CARDINALITY"], OPS["constants"]["UNKNOWN_CARDINALITY"])
    assert sx.data.experimental.AUTOTUNE == sx.data.AUTOTUNE


def test_repeat_forever_of_a_pass_with_no_elements_ends():
    # Intent: TensorFlow ends `repeat()` when a repetition yields nothing (recorded: []), instead of
    # looping forever; len() of unknown and infinite datasets raises TypeError as tf.data's does.
    ds = run("tf.data.Dataset.range(10).filter(lambda x: x > 20).repeat().take(3)")
    assert [plain(e) for e in ds] == OPS["filter_repeat_forever_of_nothing"] == []
    for expression, message in (("tf.data.Dataset.range(10).filter(lambda x: x > 2)", "unknown"),
                                ("tf.data.Dataset.range(10).repeat()", "infinite")):
        with pytest.raises(TypeError, match=message):
            len(run(expression))


# --- cache: what runs before it runs once a pass has completed -----------------------------------
CACHE = TF["cache_r1"]["result"]


def counted():
    calls = [0]

    def f(x):
        calls[0] += 1
        return x * 10
    return sx.data.Dataset.from_tensor_slices(np.arange(5)).map(f), calls


def ints(ds):
    return [int(v) for v in ds]


def test_cache_runs_the_map_as_often_as_tensorflow():
    # Intent: the map before cache() runs once for two full passes and for repeat(3); a pass
    # stopped early (take) keeps nothing, so the next full pass maps again (TensorFlow: 2 + 5 calls).
    ds, calls = counted()
    ds = ds.cache()
    assert {"elements": [ints(ds), ints(ds)], "map_calls": calls[0]} == CACHE["two_passes"]
    ds, calls = counted()
    assert {"elements": ints(ds.cache().repeat(3)), "map_calls": calls[0]} == CACHE["cache_repeat3"]
    ds, calls = counted()
    ds = ds.cache()
    got = [ints(ds.take(2)), ints(ds), ints(ds)]
    assert {"elements": got, "map_calls": calls[0]} == CACHE["partial_then_full"]
    ds, calls = counted()
    ds = ds.cache().take(2)
    assert {"elements": [ints(ds), ints(ds)], "map_calls": calls[0]} == CACHE["cache_take2_twice"]


def test_cache_keeps_a_random_map_and_lets_shuffle_reshuffle():
    # Intent: a random map before cache() gives the same values every pass (TensorFlow: recorded
    # True); a shuffle after it still draws a new order each pass over the same values.
    rng = np.random.default_rng(0)
    ds = sx.data.Dataset.from_tensor_slices(np.arange(8)).map(lambda x: float(rng.random())).cache()
    assert [float(v) for v in ds] == [float(v) for v in ds] and CACHE["random_map_cached_same_each_pass"]
    uncached = sx.data.Dataset.from_tensor_slices(np.arange(8)).map(lambda x: float(rng.random()))
    assert [float(v) for v in uncached] != [float(v) for v in uncached]
    shuffled = ds.shuffle(8, seed=1)
    a, b = [float(v) for v in shuffled], [float(v) for v in shuffled]
    assert a != b and sorted(a) == sorted(b) == sorted(float(v) for v in ds)


def test_cache_to_a_file_is_read_by_a_later_dataset(tmp_path):
    # Intent: cache(filename) writes the complete pass; another dataset naming the same file reads
    # it and never runs its own map (TensorFlow: [0, 10, ...] again, 5 map calls in all).
    tf = TF["cache_file_r1"]["result"]
    path = str(tmp_path / "c")
    ds, calls = counted()
    first = ints(ds.cache(path))
    other_calls = [0]

    def other_map(x):
        other_calls[0] += 1
        return x + 1000
    second = ints(sx.data.Dataset.from_tensor_slices(np.arange(5)).map(other_map).cache(path))
    assert (first, second, calls[0]) == (tf["first"], tf["second_dataset_reads_the_file"], tf["map_calls"])
    assert other_calls[0] == 0


# --- errors -----------------------------------------------------------------------------------
ERRORS = TF["errors_r1"]["result"]


def test_unbatch_of_scalars_or_of_uneven_components_raises():
    # Intent: TensorFlow refuses both (recorded ValueErrors); here a ValueError when the element is read.
    assert ERRORS["unbatch_scalar"]["error"] == ERRORS["unbatch_ragged_leaves"]["error"] == "ValueError"
    with pytest.raises(ValueError, match="scalar"):
        list(sx.data.Dataset.from_tensor_slices(np.arange(3)).unbatch())
    uneven = sx.data.Dataset.from_tensor_slices(np.arange(1)).map(lambda _: (np.zeros(2), np.zeros(3)))
    with pytest.raises(ValueError, match="2 and 3"):
        list(uneven.unbatch())


def test_prefetch_with_a_bad_buffer_size_fails_at_the_users_line():
    # Intent: TensorFlow raises InvalidArgumentError (a ValueError) for prefetch(-2); skip(-1)
    # and skip(-2) give no elements (recorded []).
    assert ERRORS["prefetch_minus_2"]["error"] == "InvalidArgumentError"
    ds = sx.data.Dataset.from_tensor_slices(np.arange(3))
    with pytest.raises(ValueError) as err:
        line = here(); ds.prefetch(-2)  # noqa: E702
    assert_names_this_line(err, line)
    assert ints(ds.skip(-1)) == ERRORS["skip_minus_1"] == [] and ints(ds.skip(-2)) == ERRORS["skip_minus_2"]


# --- options -----------------------------------------------------------------------------------
def test_with_options_auto_shard_policy_is_what_distribution_reads():
    # Intent: the multi-worker tutorial's `options.experimental_distribute.auto_shard_policy = OFF`
    # then `dataset.with_options(options)` decides how workers share the dataset; a misspelt
    # option is an AttributeError (TensorFlow: "Cannot set the property foo on Options").
    ds = sx.data.Dataset.from_tensor_slices(np.arange(8)).batch(4)
    assert dataset_policy(ds, InputOptions()) is sx.AutoShardPolicy.AUTO
    options = sx.data.Options()
    options.experimental_distribute.auto_shard_policy = sx.data.experimental.AutoShardPolicy.OFF
    off = ds.with_options(options).prefetch(sx.data.AUTOTUNE)
    assert off.options().experimental_distribute.auto_shard_policy is sx.AutoShardPolicy.OFF
    assert dataset_policy(off, InputOptions()) is sx.AutoShardPolicy.OFF
    assert dataset_policy(off, InputOptions(auto_shard_policy=sx.AutoShardPolicy.DATA)) is sx.AutoShardPolicy.DATA
    assert ds.options().experimental_distribute.auto_shard_policy is sx.AutoShardPolicy.AUTO  # unchanged
    with pytest.raises(AttributeError):
        options.foo = 1  # type: ignore[attr-defined]


def test_a_cached_unbatched_prefetched_dataset_distributes_as_its_rows():
    # Intent: the tutorial's pipeline (map, cache, batch, prefetch) through
    # experimental_distribute_dataset gives each replica TensorFlow's split of the same rows.
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    ds = (sx.data.Dataset.from_tensor_slices(x).batch(3).unbatch().map(lambda r: r * 2).cache()
          .batch(4).prefetch(sx.data.AUTOTUNE))
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    got = [[np.asarray(v) for v in strategy.experimental_local_results(b)]
           for b in strategy.experimental_distribute_dataset(ds)]
    want = [[x[0:2] * 2, x[2:4] * 2], [x[4:6] * 2, x[6:7] * 2]]
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            np.testing.assert_array_equal(a, b)
