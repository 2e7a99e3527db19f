"""Record the tf.data.Dataset methods strategax's `sx.data.Dataset` spells the same way for Keras
and the Keras tutorials (issue 34): `unbatch` (elements, cardinality, the error for a scalar
element or leaves of different batch sizes), `cache` (how often the map before it runs over
several passes, a partial first pass, a file cache reused by a second dataset), `prefetch`
(elements unchanged; the error for a bad buffer size), `skip`, `filter`, and the cardinality
of chains whose length is unknown. Writes tests/data/tf/dataset_ops.json via run_all.sh; each
scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, enc, err, main  # noqa: E402

# (name, dataset expression): elements and cardinality are recorded
CASES = [
    ("unbatch_range", "tf.data.Dataset.range(10).batch(3).unbatch()"),
    ("unbatch_pairs", "tf.data.Dataset.from_tensor_slices((np.arange(14, dtype=np.float32).reshape(7, 2), "
                      "np.arange(7, dtype=np.int64))).batch(4).unbatch()"),
    ("unbatch_dict", "tf.data.Dataset.from_tensor_slices({'a': np.arange(6).reshape(3, 2), "
                     "'b': np.arange(3)}).batch(2).unbatch()"),
    ("unbatch_rebatch", "tf.data.Dataset.range(7).batch(3).unbatch().batch(2)"),
    ("unbatch_take", "tf.data.Dataset.range(10).batch(4).unbatch().take(5)"),
    ("skip", "tf.data.Dataset.range(7).skip(3)"),
    ("skip_past_end", "tf.data.Dataset.range(3).skip(5)"),
    ("filter", "tf.data.Dataset.range(10).filter(lambda x: x % 3 == 0)"),
    ("prefetch", "tf.data.Dataset.range(5).prefetch(2)"),
    ("prefetch_autotune", "tf.data.Dataset.range(5).batch(2).prefetch(tf.data.AUTOTUNE)"),
    ("cache", "tf.data.Dataset.range(5).cache()"),
]

# cardinality only (some are infinite)
CARDINALITY = [
    "tf.data.Dataset.range(10).filter(lambda x: x > 2)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).batch(2)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).take(3)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).repeat()",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).repeat(2)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).shard(2, 0)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).skip(2)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).shuffle(4).map(lambda x: x).cache().prefetch(1)",
    "tf.data.Dataset.range(10).repeat().skip(3)",
    "tf.data.Dataset.range(10).batch(2).repeat().unbatch()",
    "tf.data.Dataset.range(10).repeat().take(4)",
    "tf.data.Dataset.range(10).repeat().cache()",
    "tf.data.Dataset.range(10).skip(12)",
    "tf.data.Dataset.range(10).skip(-1)",
    "tf.data.Dataset.range(0).repeat()",
    "tf.data.Dataset.range(10).filter(lambda x: x > 20).repeat()",
    "tf.data.Dataset.range(10).repeat().filter(lambda x: x > 2)",
    "tf.data.Dataset.range(10).take(-1)",
    "tf.data.Dataset.range(10).repeat().shard(2, 0)",
    "tf.data.Dataset.range(10).filter(lambda x: x > 2).batch(2, drop_remainder=True)",
    "tf.data.Dataset.range(10).batch(2).take(0).unbatch()",
]


@scenario("ops", devices=(1,))
def ops(tf, n):
    """Each CASES dataset: its elements (in order) and cardinality; CARDINALITY's cardinalities."""
    import numpy as np  # noqa: F401 - used by the CASES expressions
    out = {}
    for name, make in CASES:
        ds = eval(make)
        out[name] = {"dataset": make, "elements": [enc(e) for e in ds.as_numpy_iterator()],
                     "cardinality": int(ds.cardinality())}
    out["cardinality"] = {}
    for make in CARDINALITY:
        out["cardinality"][make] = int(eval(make).cardinality())
    out["filter_repeat_forever_of_nothing"] = enc(list(
        tf.data.Dataset.range(10).filter(lambda x: x > 20).repeat().take(3).as_numpy_iterator()))
    out["constants"] = {"AUTOTUNE": tf.data.AUTOTUNE, "INFINITE_CARDINALITY": tf.data.INFINITE_CARDINALITY,
                        "UNKNOWN_CARDINALITY": tf.data.UNKNOWN_CARDINALITY}
    return out


@scenario("errors", devices=(1,))
def errors(tf, n):
    """unbatch of scalar elements and of leaves with different batch sizes; prefetch(-2); skip(-1)."""
    import numpy as np
    out = {}

    def attempt(key, fn):
        try:
            out[key] = enc(fn())
        except Exception as e:  # noqa: BLE001 -- recorded
            out[key] = err(e)
    attempt("unbatch_scalar", lambda: list(tf.data.Dataset.range(3).unbatch().as_numpy_iterator()))
    attempt("unbatch_ragged_leaves", lambda: list(tf.data.Dataset.range(1).map(
        lambda _: (tf.zeros((2,)), tf.zeros((3,)))).unbatch().as_numpy_iterator()))
    attempt("prefetch_minus_2", lambda: list(tf.data.Dataset.range(3).prefetch(-2).as_numpy_iterator()))
    attempt("skip_minus_1", lambda: list(tf.data.Dataset.range(3).skip(-1).as_numpy_iterator()))
    attempt("skip_minus_2", lambda: list(tf.data.Dataset.range(3).skip(-2).as_numpy_iterator()))
    del np
    return out


def _counted(tf):
    """range(5) mapped through a Python function that counts its calls."""
    calls = [0]

    def f(x):
        calls[0] += 1
        return x * 10
    ds = tf.data.Dataset.range(5).map(lambda x: tf.py_function(f, [x], tf.int64))
    return ds, calls


@scenario("cache", devices=(1,))
def cache(tf, n):
    """How often the map before `cache()` runs: two full passes, `cache().repeat(3)`, a partial
    first pass (take(2)) then a full one, `cache().take(2)` twice; values of a random map cached."""
    out = {}
    ds, calls = _counted(tf)
    ds = ds.cache()
    passes = [[int(v) for v in ds.as_numpy_iterator()] for _ in range(2)]
    out["two_passes"] = {"elements": passes, "map_calls": calls[0]}
    ds, calls = _counted(tf)
    out["cache_repeat3"] = {"elements": [int(v) for v in ds.cache().repeat(3).as_numpy_iterator()],
                            "map_calls": calls[0]}
    ds, calls = _counted(tf)
    ds = ds.cache()
    part = [int(v) for v in ds.take(2).as_numpy_iterator()]
    full = [int(v) for v in ds.as_numpy_iterator()]
    again = [int(v) for v in ds.as_numpy_iterator()]
    out["partial_then_full"] = {"elements": [part, full, again], "map_calls": calls[0]}
    ds, calls = _counted(tf)
    ds = ds.cache().take(2)
    twice = [[int(v) for v in ds.as_numpy_iterator()] for _ in range(2)]
    out["cache_take2_twice"] = {"elements": twice, "map_calls": calls[0]}
    rnd = tf.data.Dataset.range(4).map(lambda x: tf.random.uniform(())).cache()
    a, b = (list(rnd.as_numpy_iterator()) for _ in range(2))
    out["random_map_cached_same_each_pass"] = bool(a == b)
    return out


@scenario("cache_file", devices=(1,))
def cache_file(tf, n):
    """cache(filename): a second dataset (another map) with the same file reads the file."""
    import tempfile
    d = tempfile.mkdtemp()
    path = os.path.join(d, "c")
    ds, calls = _counted(tf)
    first = [int(v) for v in ds.cache(path).as_numpy_iterator()]
    other = tf.data.Dataset.range(5).map(lambda x: x + 1000).cache(path)
    second = [int(v) for v in other.as_numpy_iterator()]
    return {"first": first, "second_dataset_reads_the_file": second, "map_calls": calls[0],
            "files": sorted(f.replace(path, "PATH") for f in (os.path.join(d, x) for x in os.listdir(d)))}


if __name__ == "__main__":
    main()
