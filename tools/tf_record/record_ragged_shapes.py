"""Record TensorFlow's behaviour for per-replica values whose shapes differ on any axis (issue 25,
item 3): `strategy.gather` and `ReplicaContext.all_gather` (eagerly and in a tf.function) of
values shaped (1, r+1) and (r+1, 2) on replica r, along axis 0 and 1; nested structures; reduce
along an axis; experimental_local_results; widths [2, 3, 1] on 3 replicas (the first replica not
the widest); a dataset whose second element is wider, distributed with
distribute_datasets_from_function (replica 1 gets the wider one).

Every case runs in its own process, in one mode (`eager` or `tf_function`): TensorFlow's
collective instances clash when several of these run in one process (semantics.json's `ragged`
scenario recorded such clashes as errors). Writes tests/data/tf/ragged_shapes.json via
run_all.sh (``python record_ragged_shapes.py --scenario NAME``).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, local, type_tree, main  # noqa: E402


def _row(tf, r):
    """(1, r+1) on replica r: [[10r, 10r+1, ...]]."""
    return tf.reshape(tf.range(r + 1, dtype=tf.float32) + 10.0 * r, [1, r + 1])


def _col(tf, r):
    """(r+1, 2) on replica r: rows [10r + 2k, 10r + 2k + 1]."""
    return tf.reshape(tf.range(2 * (r + 1), dtype=tf.float32) + 10.0 * r, [r + 1, 2])


def _widths(tf, r):
    """(2, w) with widths [2, 3, 1] on replicas 0, 1, 2: the first replica is not the widest."""
    w = (2, 3, 1)[r]
    return tf.reshape(tf.range(2 * w, dtype=tf.float32) + 10.0 * r, [2, w])


MAKERS = {"row": _row, "col": _col, "widths": _widths}


def _ag(tf, axis, nested=False):
    def fn(v):
        ctx = tf.distribute.get_replica_context()
        return ctx.all_gather({"a": v, "b": [v]} if nested else v, axis=axis)
    return fn


def _cases(tf, st, x):
    return {
        "local_results": lambda: st.experimental_local_results(x),
        "gather_axis0": lambda: st.gather(x, axis=0),
        "gather_axis1": lambda: st.gather(x, axis=1),
        "gather_nested_axis1": lambda: st.gather({"a": x, "b": [x]}, axis=1),
        "gather_nested_axis0": lambda: st.gather({"a": x, "b": [x]}, axis=0),
        "all_gather_axis0": lambda: st.run(_ag(tf, 0), args=(x,)),
        "all_gather_axis1": lambda: st.run(_ag(tf, 1), args=(x,)),
        "all_gather_nested_axis0": lambda: st.run(_ag(tf, 0, True), args=(x,)),
        "all_gather_nested_axis1": lambda: st.run(_ag(tf, 1, True), args=(x,)),
        "reduce_sum_axis0": lambda: st.reduce("SUM", x, axis=0),
        "reduce_sum_axis1": lambda: st.reduce("SUM", x, axis=1),
        "reduce_mean_axis1": lambda: st.reduce("MEAN", x, axis=1),
        "run_times2": lambda: st.run(lambda v: v * 2.0, args=(x,)),
    }


def _record(tf, st, body, mode):
    fn = tf.function(body) if mode == "tf_function" else body
    try:
        r = fn()
        return {"type_tree": type_tree(r), "value": enc(r), "local_results": local(st, r)}
    except Exception as e:  # noqa: BLE001 -- we record every error
        return err(e)


def _register(value, case, mode, devices):
    def run(tf, n):
        st = mirrored(tf, n)
        x = st.experimental_distribute_values_from_function(
            lambda ctx: MAKERS[value](tf, ctx.replica_id_in_sync_group))
        return _record(tf, st, _cases(tf, st, x)[case], mode)
    run.__doc__ = "%s of the per-replica value `%s` (%s), %s." % (
        case, value, MAKERS[value].__doc__, mode)
    scenario("%s_%s_%s" % (value, case, mode), devices=devices)(run)


_CASE_NAMES = ["local_results", "gather_axis0", "gather_axis1", "gather_nested_axis1", "gather_nested_axis0",
               "all_gather_axis0", "all_gather_axis1", "all_gather_nested_axis0", "all_gather_nested_axis1",
               "reduce_sum_axis0", "reduce_sum_axis1", "reduce_mean_axis1", "run_times2"]
for _mode in ("eager", "tf_function"):
    for _case in _CASE_NAMES:
        _register("row", _case, _mode, (2,))
        _register("col", _case, _mode, (2,))
    for _case in ("gather_axis1", "all_gather_axis1", "reduce_sum_axis1", "local_results"):
        _register("widths", _case, _mode, (3,))


def _dataset_step(tf, st, what):
    def step(x):
        if what == "local_results":
            return st.experimental_local_results(x)
        if what == "gather_axis1":
            return st.gather(x, axis=1)
        if what == "gather_axis0":
            return st.gather(x, axis=0)
        if what == "reduce_sum_axis1":
            return st.reduce("SUM", x, axis=1)
        if what == "all_gather_axis1":
            return st.run(_ag(tf, 1), args=(x,))
        return st.run(lambda v: v * 2.0, args=(x,))
    return step


def _register_dataset(what, mode):
    def run(tf, n):
        """distribute_datasets_from_function over elements [[0, 1]] then [[10, 11, 12]] (the
        second wider; replica 0 gets the first, replica 1 the second): per step WHAT."""
        st = mirrored(tf, n)

        def dataset_fn(ctx):
            a = tf.data.Dataset.from_tensors(tf.constant([[0.0, 1.0]]))
            b = tf.data.Dataset.from_tensors(tf.constant([[10.0, 11.0, 12.0]]))
            return a.concatenate(b)
        step = _dataset_step(tf, st, what)
        fn = tf.function(step) if mode == "tf_function" else step
        steps = []
        try:
            for x in st.distribute_datasets_from_function(dataset_fn):
                try:
                    r = fn(x)
                    steps.append({"type_tree": type_tree(r), "value": enc(r), "local_results": local(st, r)})
                except Exception as e:  # noqa: BLE001
                    steps.append(err(e))
        except Exception as e:  # noqa: BLE001
            steps.append(err(e))
        return steps
    run.__doc__ = run.__doc__.replace("WHAT", what) + " (%s)" % mode
    scenario("dataset_wider_%s_%s" % (what, mode), devices=(2,))(run)


for _mode in ("eager", "tf_function"):
    for _what in ("local_results", "gather_axis1", "gather_axis0", "reduce_sum_axis1", "all_gather_axis1",
                  "run_times2"):
        _register_dataset(_what, _mode)


if __name__ == "__main__":
    sys.exit(main())
