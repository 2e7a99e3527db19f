"""Record how tf.distribute.MirroredStrategy splits input (seed 003):
experimental_distribute_dataset with full / partial / smaller-than-replicas last
batches for arrays, tuples and dicts; distribute_datasets_from_function with
InputContext.

Writes tests/data/tf/input_split.json via run_all.sh.  Each scenario runs in its own
process: ``python record_input_split.py --scenario NAME``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, attempt, local, main  # noqa: E402

MAX_STEPS = 20


def _data(kind):
    import numpy as np
    x1 = np.arange(10, dtype=np.float32)
    x2 = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.int32) * 10
    return {"arr1d": x1, "arr2d": x2, "tuple": (x2, y), "dict": {"a": x1, "b": x2}}[kind]


DATA_DOC = {
    "arr1d": "np.arange(10, dtype=float32), shape (10,)",
    "arr2d": "np.arange(20, dtype=float32).reshape(10, 2)",
    "tuple": "(x, y) with x = np.arange(20, float32).reshape(10, 2), y = np.arange(10, int32) * 10",
    "dict": "{'a': np.arange(10, float32), 'b': np.arange(20, float32).reshape(10, 2)}",
}


def _per_leaf_local(tf, st, element):
    """nest.map_structure(experimental_local_results) over one distributed element."""
    return tf.nest.map_structure(lambda pr: [enc(c) for c in st.experimental_local_results(pr)],
                                 element)


def _iterate(tf, st, dist):
    steps = []
    for i, element in enumerate(dist):
        if i >= MAX_STEPS:
            steps.append("... stopped after %d steps" % MAX_STEPS)
            break
        try:
            steps.append(_per_leaf_local(tf, st, element))
        except Exception as e:  # noqa: BLE001
            steps.append(err(e))
    return steps


# global batch sizes per replica count: full batches, partial last batch, last batch
# smaller than the number of replicas (10 elements in all)
CONFIGS = {
    2: (2, 4, 6, 8, 3),
    3: (3, 6, 4, 9),
    4: (4, 8, 6, 5),
    8: (8, 16),
}

for _n, _gbss in CONFIGS.items():
    for _kind in ("arr1d", "arr2d", "tuple", "dict"):
        for _gbs in _gbss:
            def _mk(kind, gbs):
                def f(tf, n):
                    st = mirrored(tf, n)
                    ds = tf.data.Dataset.from_tensor_slices(_data(kind)).batch(gbs)
                    dist = st.experimental_distribute_dataset(ds)
                    global_sizes = [int(tf.nest.flatten(b)[0].shape[0]) for b in ds]
                    return {"global_batch_sizes": global_sizes,
                            "element_spec": repr(dist.element_spec),
                            "steps": _iterate(tf, st, dist)}
                f.__doc__ = ("experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices("
                             "%s).batch(%d)) over the replicas; steps[i] holds, for every leaf of "
                             "the element, the per-replica components (experimental_local_results)."
                             % (DATA_DOC[kind], gbs))
                return f
            scenario("dd_%s_b%d" % (_kind, _gbs), devices=(_n,))(_mk(_kind, _gbs))


@scenario("dd_extra", devices=(2, 4))
def dd_extra(tf, n):
    """experimental_distribute_dataset edge cases: an unbatched dataset (range(4));
    batch(5, drop_remainder=True) of 10 elements (static batch dim); a dataset batched
    with a size smaller than the replica count (range(3).batch(1)); run(identity) of a
    partial step inside a tf.function to see what the replica function receives;
    iteration inside a tf.function."""
    import numpy as np
    st = mirrored(tf, n)
    out = {}
    try:
        out["unbatched_range4"] = _iterate(tf, st, st.experimental_distribute_dataset(
            tf.data.Dataset.range(4)))
    except Exception as e:  # noqa: BLE001
        out["unbatched_range4"] = err(e)
    try:
        d = st.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)).batch(
                5, drop_remainder=True))
        out["drop_remainder_b5"] = {"element_spec": repr(d.element_spec), "steps": _iterate(tf, st, d)}
    except Exception as e:  # noqa: BLE001
        out["drop_remainder_b5"] = err(e)
    try:
        d = st.experimental_distribute_dataset(tf.data.Dataset.range(3).batch(1))
        out["range3_batch1"] = _iterate(tf, st, d)
    except Exception as e:  # noqa: BLE001
        out["range3_batch1"] = err(e)

    @tf.function
    def ident(x):
        return {"x": x, "size": tf.shape(x)[0]}

    try:
        d = st.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)).batch(4))
        steps = []
        for x in d:
            r = st.run(ident, args=(x,))
            steps.append({"x": local(st, r["x"]), "size": local(st, r["size"])})
        out["run_identity_range10_b4"] = steps
    except Exception as e:  # noqa: BLE001
        out["run_identity_range10_b4"] = err(e)

    try:
        d = st.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices(np.arange(10, dtype=np.float32)).batch(4))

        @tf.function
        def total(dist):
            acc = tf.constant(0.0)
            count = tf.constant(0)
            for x in dist:
                acc += st.reduce("SUM", x, axis=0)
                count += 1
            return acc, count
        out["sum_in_tf_function_range10_b4"] = attempt(total, d)
    except Exception as e:  # noqa: BLE001
        out["sum_in_tf_function_range10_b4"] = err(e)
    return out


# ---------------------------------------------------------------- from_function

@scenario("dffn_input_context", devices=(1, 2, 4))
def dffn_input_context(tf, n):
    """distribute_datasets_from_function: the InputContext passed to dataset_fn
    (num_input_pipelines, input_pipeline_id, num_replicas_in_sync,
    get_per_replica_batch_size(8), (6), and a non-divisible global size (7, and 3 with
    4 replicas) -> error), how many times dataset_fn is called, and the experimental_
    spelling."""
    st = mirrored(tf, n)
    calls = []

    def dataset_fn(ctx):
        rec = {"num_input_pipelines": ctx.num_input_pipelines,
               "input_pipeline_id": ctx.input_pipeline_id,
               "num_replicas_in_sync": ctx.num_replicas_in_sync,
               "repr": repr(ctx)}
        for g in (8, 6, 7, 3, 1):
            rec["get_per_replica_batch_size_%d" % g] = attempt(ctx.get_per_replica_batch_size, g)
        calls.append(rec)
        return tf.data.Dataset.range(7).batch(2)

    out = {}
    try:
        d = st.distribute_datasets_from_function(dataset_fn)
        out["contexts"] = list(calls)
        out["num_dataset_fn_calls"] = len(calls)
        out["element_spec"] = repr(d.element_spec)
    except Exception as e:  # noqa: BLE001
        out["contexts"] = err(e)
    calls.clear()
    try:
        st.experimental_distribute_datasets_from_function(dataset_fn)
        out["experimental_name_num_calls"] = len(calls)
    except Exception as e:  # noqa: BLE001
        out["experimental_name_num_calls"] = err(e)
    ic = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                    num_replicas_in_sync=4)
    out["hand_made_context"] = {
        "num_input_pipelines": ic.num_input_pipelines, "input_pipeline_id": ic.input_pipeline_id,
        "num_replicas_in_sync": ic.num_replicas_in_sync,
        "get_per_replica_batch_size_8": attempt(ic.get_per_replica_batch_size, 8),
        "get_per_replica_batch_size_6": attempt(ic.get_per_replica_batch_size, 6)}
    default = tf.distribute.InputContext()
    out["default_context"] = {
        "num_input_pipelines": default.num_input_pipelines,
        "input_pipeline_id": default.input_pipeline_id,
        "num_replicas_in_sync": default.num_replicas_in_sync}
    return out


DFFN = {
    "range7_batch2": ("tf.data.Dataset.range(7).batch(2)",
                      lambda tf, ctx: tf.data.Dataset.range(7).batch(2)),
    "range5_batch2": ("tf.data.Dataset.range(5).batch(2)",
                      lambda tf, ctx: tf.data.Dataset.range(5).batch(2)),
    "range9_batch2": ("tf.data.Dataset.range(9).batch(2)",
                      lambda tf, ctx: tf.data.Dataset.range(9).batch(2)),
    "range8_batch2": ("tf.data.Dataset.range(8).batch(2)",
                      lambda tf, ctx: tf.data.Dataset.range(8).batch(2)),
    "range5_unbatched": ("tf.data.Dataset.range(5) (no batch: scalar elements)",
                         lambda tf, ctx: tf.data.Dataset.range(5)),
    "range7_batch2_tuple": ("tf.data.Dataset.range(7).map(lambda x: (x, 10*x)).batch(2)",
                            lambda tf, ctx: tf.data.Dataset.range(7).map(
                                lambda x: (x, 10 * x)).batch(2)),
    "range7_batch2_float_2d": ("tf.data.Dataset.range(14).map(float32).batch(2) reshaped "
                               "to (?, ) -> from_tensor_slices(np.arange(14).reshape(7,2)).batch(2)",
                               lambda tf, ctx: tf.data.Dataset.from_tensor_slices(
                                   tf.reshape(tf.range(14, dtype=tf.float32), [7, 2])).batch(2)),
}

for _name, (_doc, _fn) in DFFN.items():
    def _mkd(doc, fn):
        def f(tf, n):
            st = mirrored(tf, n)
            d = st.distribute_datasets_from_function(lambda ctx: fn(tf, ctx))
            return {"element_spec": repr(d.element_spec), "steps": _iterate(tf, st, d)}
        f.__doc__ = ("distribute_datasets_from_function(dataset_fn) with dataset_fn returning "
                     "%s (per-replica batches, one input pipeline); steps[i] = what each "
                     "replica receives at step i (experimental_local_results), until the "
                     "iterator stops." % doc)
        return f
    scenario("dffn_%s" % _name, devices=(2, 3, 4))(_mkd(_doc, _fn))


@scenario("dffn_seed_example", devices=(1, 2, 4))
def dffn_seed_example(tf, n):
    """Seed 003 example: global_batch_size = 8; dataset_fn(input_context):
    batch_size = get_per_replica_batch_size(8); d = from_tensors([[1.]]).repeat().
    batch(batch_size); return d.shard(num_input_pipelines, input_pipeline_id). Records
    the first 2 steps and the element_spec."""
    st = mirrored(tf, n)
    global_batch_size = 8

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        d = tf.data.Dataset.from_tensors([[1.]]).repeat().batch(batch_size)
        return d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    ds = st.experimental_distribute_datasets_from_function(dataset_fn)
    steps = []
    it = iter(ds)
    for _ in range(2):
        steps.append(_per_leaf_local(tf, st, next(it)))
    return {"element_spec": repr(ds.element_spec), "steps": steps}


if __name__ == "__main__":
    sys.exit(main())
