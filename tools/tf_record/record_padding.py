"""Record per-replica batch statistics on partial batches in TensorFlow (issue 13): what
`tf.reduce_mean` / `tf.math.reduce_variance` give inside `strategy.run` on each replica's
piece of a partial last batch, the replica with no rows included. Writes
tests/data/tf/padding.json via run_all.sh; each scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, main  # noqa: E402


def _local(st, v):
    return [enc(x) for x in st.experimental_local_results(v)]


@scenario("mean_5_6_7", devices=(2,))
def mean_5_6_7(tf, n):
    """tf.data.Dataset.from_tensor_slices([5., 6., 7.]).batch(3) on 2 replicas (rows 2 and 1):
    strategy.run(tf.reduce_mean) per replica."""
    st = mirrored(tf, n)
    ds = tf.data.Dataset.from_tensor_slices([5.0, 6.0, 7.0]).batch(3)
    x = next(iter(st.experimental_distribute_dataset(ds)))
    return {"means": _local(st, st.run(tf.function(tf.reduce_mean), args=(x,)))}


@scenario("stats_axis0", devices=(4,))
def stats_axis0(tf, n):
    """x = (arange(1, 23).reshape(11, 2) ** 1.5) float32, batch(8) on 4 replicas: the second
    batch gives rows 1, 1, 1, 0. Per replica and step: reduce_mean(x, 0),
    reduce_variance(x, 0), reduce_mean(x)."""
    import numpy as np
    st = mirrored(tf, n)
    x = (np.arange(1.0, 23.0, dtype=np.float32).reshape(11, 2) ** 1.5).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices(x).batch(8)

    @tf.function
    def stats(b):
        return tf.reduce_mean(b, 0), tf.math.reduce_variance(b, 0), tf.reduce_mean(b)

    steps = []
    for b in st.experimental_distribute_dataset(ds):
        m, v, o = st.run(stats, args=(b,))
        steps.append({"mean0": _local(st, m), "var0": _local(st, v), "mean": _local(st, o),
                      "rows": [int(t.shape[0]) for t in st.experimental_local_results(b)]})
    return {"steps": steps}


if __name__ == "__main__":
    main()
