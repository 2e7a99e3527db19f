"""Input as the tutorial and TensorFlow's "Distributed input" guide use it: `sx.data.Dataset`
(from_tensor_slices, shuffle, batch, repeat, take), the iterator's `get_next_as_optional` and
`element_spec`, `input_signature` on `strategy.function`, a failed call that takes no batch,
and in-memory data handed over unbatched rejected at the user's line. References: NumPy
slicing of the same data and one-device plain JAX."""
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

X = np.arange(20.0, dtype=np.float32).reshape(10, 2)
Y = np.arange(10, dtype=np.int32)


def strategy():
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])


def test_from_tensor_slices_batch_repeat_take_match_numpy_slicing():
    # Intent: batches are consecutive rows stacked (the last partial unless dropped); repeat and
    # take count elements as tf.data does; len() is the cardinality.
    ds = sx.data.Dataset.from_tensor_slices((X, Y))
    assert len(ds) == 10
    batches = list(ds.batch(4))
    assert len(batches) == len(ds.batch(4)) == 3
    for k, (bx, by) in enumerate(batches):
        np.testing.assert_array_equal(bx, X[4 * k:4 * k + 4])
        np.testing.assert_array_equal(by, Y[4 * k:4 * k + 4])
    assert len(list(ds.batch(4, drop_remainder=True))) == len(ds.batch(4, drop_remainder=True)) == 2
    ys = [int(y) for _, y in ds.repeat(2)]
    assert ys == list(range(10)) * 2 and len(ds.repeat(2)) == 20
    assert [int(y) for _, y in ds.repeat().take(13)] == (list(range(10)) * 2)[:13]
    assert ds.repeat().cardinality() == -1
    assert [int(y) for _, y in ds.map(lambda x, y: (x, y * 3)).take(3)] == [0, 3, 6]


def test_shuffle_is_a_seeded_permutation_drawn_anew_each_iteration():
    # Intent: shuffle yields each element once; the same seed gives the same order; each
    # iteration (epoch, or repetition) draws a new order unless reshuffle_each_iteration=False.
    ds = sx.data.Dataset.from_tensor_slices((X, Y))
    first, second = ([int(y) for _, y in ds.shuffle(10, seed=3)] for _ in range(2))
    assert sorted(first) == list(range(10)) and first != list(range(10))
    assert first == [int(y) for _, y in ds.shuffle(10, seed=3)]
    epochs = ds.shuffle(10, seed=3)
    orders = [[int(y) for _, y in epochs] for _ in range(3)]
    assert all(sorted(o) == list(range(10)) for o in orders) and len({tuple(o) for o in orders}) == 3
    fixed = ds.shuffle(10, seed=3, reshuffle_each_iteration=False)
    assert [int(y) for _, y in fixed] == [int(y) for _, y in fixed]
    small = [int(y) for _, y in ds.shuffle(2, seed=0)]  # a small buffer: a permutation still
    assert sorted(small) == list(range(10))
    batches = list(ds.shuffle(10, seed=1).batch(4))
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]),
                                  X[np.concatenate([b[1] for b in batches])])


def test_distributed_dataset_of_sx_data_splits_like_the_numpy_batches():
    # Intent: sx.data's batches, distributed, give replica r rows [r*ceil(B/2) ...] of each
    # global batch; experimental_make_numpy_dataset is the same dataset.
    s = strategy()
    for ds in (sx.data.Dataset.from_tensor_slices((X, Y)).batch(4),
               s.experimental_make_numpy_dataset((X, Y)).batch(4)):
        got = [[np.asarray(v) for v in s.experimental_local_results(b[1])]
               for b in s.experimental_distribute_dataset(ds)]
        want = [[Y[0:2], Y[2:4]], [Y[4:6], Y[6:8]], [Y[8:9], Y[9:10]]]
        for g, w in zip(got, want):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)


def test_unbatched_in_memory_data_is_rejected_at_the_users_line():
    # Intent: experimental_distribute_dataset((x, y)) would iterate the tuple (x, then y, as
    # two "batches"); it raises naming the user's line and the documented way.
    s = strategy()
    line = here() + 2
    with pytest.raises(ValueError) as e:
        s.experimental_distribute_dataset((X, Y))
    assert_names_this_line(e, line)
    assert "from_tensor_slices" in str(e.value)
    with pytest.raises(ValueError):
        s.experimental_distribute_dataset({"x": X, "y": Y})


def test_get_next_as_optional_yields_every_batch_then_an_empty_optional():
    # Intent: the guide's loop, `while optional.has_value()`, sees each batch once and stops;
    # get_value() of the empty Optional raises naming the user's line.
    s = strategy()
    it = iter(s.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices((X, Y)).batch(4)))
    seen = []
    while True:
        optional = it.get_next_as_optional()
        if not optional.has_value():
            break
        seen.append(np.concatenate(s.experimental_local_results(optional.get_value()[1])))
    np.testing.assert_array_equal(np.concatenate(seen), Y)
    line = here() + 2
    with pytest.raises(ValueError) as e:
        optional.get_value()
    assert_names_this_line(e, line)


def test_iterator_element_spec_does_not_take_a_batch():
    # Intent: iterator.element_spec is the dataset's (per replica, unknown batch axis) and the
    # next batch is still the first one.
    s = strategy()
    dist = s.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices((X, Y)).batch(4))
    it = iter(dist)
    spec = it.element_spec
    assert spec == dist.element_spec
    assert spec == (sx.TensorSpec((None, 2), np.float32), sx.TensorSpec((None,), np.int32))
    np.testing.assert_array_equal(s.experimental_local_results(next(it)[1])[0], Y[:2])


def test_input_signature_checks_arguments_and_takes_python_numbers_as_arrays():
    # Intent: a function with an input_signature runs matching arguments (plain JAX's numbers),
    # raises naming the user's line on a mismatch, and takes Python numbers as arrays of the
    # spec's dtype (one program for every learning rate).
    s = strategy()
    it = iter(s.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices((X, Y)).batch(4)))

    def step(batch, lr):
        return s.run(lambda x, y: jnp.sum(x) * lr + y.sum(), args=batch)

    f = s.function(step, input_signature=[it.element_spec, sx.TensorSpec((), np.float32)])
    for k, lr in enumerate([0.5, 0.25]):
        got = s.experimental_local_results(f(next(it), lr))
        for r in range(2):
            rows = slice(4 * k + 2 * r, 4 * k + 2 * r + 2)
            np.testing.assert_allclose(got[r], X[rows].sum() * lr + Y[rows].sum())
    assert len(f._cache) == 1
    line = here() + 2
    with pytest.raises(ValueError) as e:
        f(next(it), jnp.zeros(2))
    assert_names_this_line(e, line)
    line = here() + 2
    with pytest.raises(TypeError) as e:
        f(X, 0.5)
    assert_names_this_line(e, line)


def test_a_call_that_fails_after_taking_a_batch_puts_it_back(monkeypatch):
    # Intent: a compiled call with next(iterator) inside that fails while running consumes no
    # batch: the next call gets the batch the failed one took.
    s = strategy()
    it = iter(s.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices((X, Y)).batch(4)))
    f = s.function(lambda it: s.run(lambda x, y: y * 2, args=next(it)))
    f(it)  # compiles, takes batch 0
    original = s._execute

    def failing(*args, **kwargs):
        raise RuntimeError("the device failed")

    monkeypatch.setattr(s, "_execute", failing)
    with pytest.raises(RuntimeError):
        f(it)
    monkeypatch.setattr(s, "_execute", original)
    got = s.experimental_local_results(f(it))
    np.testing.assert_array_equal(np.concatenate(got), Y[4:8] * 2)


# --- Dataset.shard (recorded from TensorFlow 2.21: tests/data/tf/dataset_shard.json) ----------
SHARD = json.loads((Path(__file__).parent / "data/tf/dataset_shard.json").read_text())["scenarios"]
PAIR_X, PAIR_Y = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6, dtype=np.int64)
SHARD_CASES = {  # the recording's datasets, in sx.data (sx.data has no `range`: the rows of an arange)
    "range10": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(10)).shard(s, i),
    "range7": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(7)).shard(s, i),
    "range2_of_3": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(2)).shard(s, i),
    "range5_one_shard": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(5)).shard(s, i),
    "pairs": lambda s, i: sx.data.Dataset.from_tensor_slices((PAIR_X, PAIR_Y)).shard(s, i),
    "batched": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(10)).batch(3).shard(s, i),
    "sharded_then_batched": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(11)).shard(s, i).batch(2),
    "repeated": lambda s, i: sx.data.Dataset.from_tensor_slices(np.arange(5)).repeat(2).shard(s, i),
}


def _plain(element):
    """An element as the recording writes it (values only)."""
    if isinstance(element, tuple):
        return [_plain(e) for e in element]
    return np.asarray(element).tolist()


@pytest.mark.parametrize("name", sorted(SHARD_CASES))
def test_shard_keeps_tensorflows_elements_in_tensorflows_order(name):
    # Intent: shard(num_shards, index) keeps element i when i % num_shards == index, before or
    # after batch and repeat, with TensorFlow's cardinality.
    recorded = SHARD["shard_r1"]["result"][name]
    assert len(recorded["shards"]) == recorded["num_shards"]
    for index, tf in enumerate(recorded["shards"]):
        ds = SHARD_CASES[name](recorded["num_shards"], index)
        want = [[leaf["value"] for leaf in e] if isinstance(e, list) else e["value"] for e in tf["elements"]]
        assert [_plain(e) for e in ds] == want, (name, index)
        assert ds.cardinality() == tf["cardinality"]


@pytest.mark.parametrize("shards,index", [(0, 0), (2, 2), (2, -1)])
def test_shard_with_a_bad_num_shards_or_index_fails_at_the_users_line(shards, index):
    # Intent: TensorFlow raises InvalidArgumentError for these (recorded); here a ValueError at the call.
    recorded = SHARD["shard_errors_r1"]["result"][f"{shards},{index}"]
    assert recorded["error"] == "InvalidArgumentError"
    ds = sx.data.Dataset.from_tensor_slices(np.arange(4))
    with pytest.raises(ValueError) as err:
        line = here(); ds.shard(shards, index)  # noqa: E702
    assert_names_this_line(err, line)
    assert ("num_shards" if shards == 0 else "index") in str(err.value)


# --- 64-bit integers, local results of a pair ------------------------------------------------
def test_int64_labels_are_narrowed_with_one_note_and_never_wrapped(caplog):
    # Intent: JAX keeps no int64 by default: labels that fit become int32 with the same values and
    # one note; a value int32 cannot hold raises instead of wrapping (a silent wrong label).
    from strategax.input.place import _note_narrowed

    _note_narrowed.cache_clear()  # the note is once per process: start afresh
    st = strategy()
    y = np.array([3, 1, 4, 1], np.int64)
    with caplog.at_level("WARNING", logger="strategax"):
        batches = [b for _ in range(2) for b in st.experimental_distribute_dataset(
            sx.data.Dataset.from_tensor_slices((X[:4], y)).batch(4))]
    notes = [r for r in caplog.records if "int64 input is narrowed to int32" in r.getMessage()]
    assert len(notes) == 1  # two iterations, two batches: one note
    for _, labels in batches:
        got = [np.asarray(v) for v in st.experimental_local_results(labels)]
        assert [g.dtype for g in got] == [np.int32, np.int32]
        np.testing.assert_array_equal(np.concatenate(got), y)
    big = np.array([1, 2 ** 40], np.int64)
    with pytest.raises(ValueError) as err:
        line = here(); next(iter(st.experimental_distribute_dataset([big])))  # noqa: E702
    assert_names_this_line(err, line)
    assert "1099511627776" in str(err.value) and "jax_enable_x64" in str(err.value)


def test_local_results_of_an_x_y_batch_are_one_pair_per_replica():
    # Intent: experimental_local_results of a tuple of per-replica values gives one (x, y) per
    # replica, x and y the replica's rows (NumPy slicing of the batch).
    st = strategy()
    batch = next(iter(st.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices((X, Y)).batch(4))))
    pairs = st.experimental_local_results(batch)
    assert len(pairs) == 2
    for k, (x, y) in enumerate(pairs):
        np.testing.assert_array_equal(np.asarray(x), X[2 * k:2 * k + 2])
        np.testing.assert_array_equal(np.asarray(y), Y[2 * k:2 * k + 2])
