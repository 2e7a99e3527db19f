"""Record tf.data.Dataset.shard (issue 30): which elements each shard keeps and in what order
(after range, from_tensor_slices of an (x, y) pair, batch, repeat; shard then batch), each
shard's cardinality, and the errors for a bad num_shards or index. Writes
tests/data/tf/dataset_shard.json via run_all.sh; each scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, enc, err, main  # noqa: E402

# (name, how the dataset is made, num_shards); every index 0..num_shards-1 is recorded
CASES = [
    ("range10", "tf.data.Dataset.range(10)", 3),
    ("range7", "tf.data.Dataset.range(7)", 2),
    ("range2_of_3", "tf.data.Dataset.range(2)", 3),
    ("range5_one_shard", "tf.data.Dataset.range(5)", 1),
    ("pairs", "tf.data.Dataset.from_tensor_slices((np.arange(12, dtype=np.float32).reshape(6, 2), "
              "np.arange(6, dtype=np.int64)))", 4),
    ("batched", "tf.data.Dataset.range(10).batch(3)", 2),
    ("sharded_then_batched", "tf.data.Dataset.range(11).shard({shards}, {index}).batch(2)", 2),
    ("repeated", "tf.data.Dataset.range(5).repeat(2)", 3),
]


@scenario("shard", devices=(1,))
def shard(tf, n):
    """Every index of each CASES dataset: the elements (in order) and the cardinality."""
    import numpy as np  # noqa: F401 - used by the CASES expressions
    out = {}
    for name, make, shards in CASES:
        per_index = []
        for index in range(shards):
            if "{shards}" in make:
                ds = eval(make.format(shards=shards, index=index))
            else:
                ds = eval(make).shard(shards, index)
            per_index.append({"elements": [enc(e) for e in ds.as_numpy_iterator()],
                              "cardinality": int(ds.cardinality())})
        out[name] = {"dataset": make, "num_shards": shards, "shards": per_index}
    return out


@scenario("shard_errors", devices=(1,))
def shard_errors(tf, n):
    """shard(0, 0), shard(2, 2), shard(2, -1) of range(4): TensorFlow's errors."""
    out = {}
    for shards, index in ((0, 0), (2, 2), (2, -1)):
        try:
            list(tf.data.Dataset.range(4).shard(shards, index).as_numpy_iterator())
            out[f"{shards},{index}"] = "no error"
        except Exception as e:  # noqa: BLE001 -- recorded
            out[f"{shards},{index}"] = err(e)
    return out


if __name__ == "__main__":
    main()
