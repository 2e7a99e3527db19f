"""Record TensorFlow's behaviour for issue 25 ("TensorFlow's last gaps"): `for x in dataset`
and `for x in iterator` inside a tf.function (the tutorial's train_epoch against a Python loop,
sums, several loops, break), per-example values returned from a tf.function, hostile inputs
(strings and Python objects given to or returned by `strategy.run`, a dataset batch of
strings, a Python int beyond int32, MEAN of zero-size values), a checkpoint whose names
would flatten to one, and a sync-on-read SUM int32 counter restored on fewer replicas.

Writes tests/data/tf/gaps.json via run_all.sh; each scenario runs in its own process
(``python record_gaps.py --scenario NAME``).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
from _common import scenario, mirrored, enc, err, attempt, run_child, setup, main  # noqa: E402


def _values_lib():
    from tensorflow.python.distribute import values as values_lib
    return values_lib


def _kinds(x):
    """Type names of a result's components (TF hands strings and objects through as they are)."""
    values = getattr(x, "values", None)
    if values is not None and not hasattr(x, "numpy"):
        return {"type": type(x).__name__, "values": [type(v).__name__ for v in values]}
    return type(x).__name__


# ---------------------------------------------------------------- hostile inputs

@scenario("hostile_inputs", devices=(2,))
def hostile_inputs(tf, n):
    """strategy.run(lambda x: x, args=(A,)) for a NumPy string array and an object array; a
    replica function returning the Python string "abc" and an object(); a PerReplica of Python
    strings; the first element of a distributed dataset of a string batch; run(lambda x: x + 1,
    args=(2**40,)) eagerly and in a tf.function; strategy.reduce(MEAN, v, axis=0) of per-replica
    zero-size values (shapes (0,), (0, 3), int32 (0,)) and SUM of (0, 3)."""
    import numpy as np
    st = mirrored(tf, n)
    pr = lambda fn: st.experimental_distribute_values_from_function(lambda ctx: fn())  # noqa: E731

    def kinds(fn):
        try:
            return {"result": _kinds(fn())}
        except Exception as e:  # noqa: BLE001
            return err(e)

    out = {
        "run_string_array": kinds(lambda: st.run(lambda x: x, args=(np.array(["a", "b"]),))),
        "run_object_array": kinds(lambda: st.run(lambda x: x, args=(np.array([object(), 1], dtype=object),))),
        "fn_returns_string": kinds(lambda: st.run(lambda: "abc")),
        "fn_returns_object": kinds(lambda: st.run(lambda: object())),
        "per_replica_of_strings": kinds(lambda: st.run(lambda x: x, args=(_values_lib().PerReplica(["a", "b"]),))),
    }
    ds = tf.data.Dataset.from_tensor_slices(np.array(["a", "b", "c", "d"])).batch(4)
    out["dataset_of_strings"] = attempt(lambda: next(iter(st.experimental_distribute_dataset(ds))))
    out["run_int_2_40"] = attempt(lambda: st.run(lambda x: x + 1, args=(2 ** 40,)))
    out["function_int_2_40"] = attempt(lambda: tf.function(lambda x: st.run(lambda y: y + 1, args=(x,)))(2 ** 40))
    out["mean_axis0_shape_0"] = attempt(lambda: st.reduce("MEAN", pr(lambda: tf.zeros((0,))), axis=0))
    out["mean_axis0_shape_0_3"] = attempt(lambda: st.reduce("MEAN", pr(lambda: tf.zeros((0, 3))), axis=0))
    out["mean_axis0_int32_shape_0"] = attempt(lambda: st.reduce("MEAN", pr(lambda: tf.zeros((0,), tf.int32)), axis=0))
    out["sum_axis0_shape_0_3"] = attempt(lambda: st.reduce("SUM", pr(lambda: tf.zeros((0, 3))), axis=0))
    return out


# ---------------------------------------------------------------- loops over the data

def _numbers(tf, n_replicas):
    """The 11 numbers 0..10 as float32, batch(4): global batches of 4, 4 and 3."""
    return tf.data.Dataset.range(11).map(lambda x: tf.cast(x, tf.float32)).batch(4)


@scenario("train_epoch", devices=(2,))
def train_epoch(tf, n):
    """The custom-training tutorial's `train_epoch` (docs/porting.md section 4): w * x + b fitted to
    3x + 1 on x = arange(10) / 10, batch(4), SGD(0.5), loss compute_average_loss(global_batch_size=4);
    `for x in dataset` inside a tf.function sums reduce(SUM, per_example, axis=0) per epoch, 3 epochs.
    Then the same with the loop in Python over a tf.function step, from fresh variables."""
    import numpy as np
    st = mirrored(tf, n)
    x = np.arange(10, dtype=np.float32) / 10
    dataset = tf.data.Dataset.from_tensor_slices((x, 3 * x + 1)).batch(4)
    dist = st.experimental_distribute_dataset(dataset)
    out = {}
    for variant in ("in_function", "python_loop"):
        with st.scope():
            w, b = tf.Variable(0.0), tf.Variable(0.0)
            opt = tf.keras.optimizers.SGD(0.5)

        def replica_fn(inputs):
            xs, ys = inputs
            with tf.GradientTape() as tape:
                per_example = (w * xs + b - ys) ** 2
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=4)
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return per_example

        @tf.function
        def step(batch):
            return st.reduce("SUM", st.run(replica_fn, args=(batch,)), axis=0)

        @tf.function
        def epoch(ds):
            total = 0.
            for batch in ds:
                total += st.reduce("SUM", st.run(replica_fn, args=(batch,)), axis=0)
            return total

        totals = []
        for _ in range(3):
            if variant == "in_function":
                totals.append(float(epoch(dist)))
            else:
                total = 0.
                for batch in dist:
                    total += float(step(batch))
                totals.append(total)
        out[variant] = {"totals": totals, "w": enc(w), "b": enc(b)}
    return out


@scenario("dataset_loops", devices=(3,))
def dataset_loops(tf, n):
    """Inside a tf.function over the dataset 0..10 batch(4) (global batches of 4, 4, 3) on 3
    replicas: `for x in dist_dataset` summing reduce(SUM, x, axis=0) and keeping the last batch's
    reduce(MEAN, x, axis=0); two loops in one function; next(iterator) then `for x in iterator`,
    also on an iterator one batch in; a loop over distribute_datasets_from_function's dataset
    (per-replica batches of two copies of i, i = 0..6); a loop over an empty dataset; a Python int
    counter in the loop; `break` in a dataset loop and a tensor-conditioned `break` in an
    iterator loop."""
    st = mirrored(tf, n)
    dist = st.experimental_distribute_dataset(_numbers(tf, n))
    R = lambda op, x: st.reduce(op, x, axis=0)  # noqa: E731
    out = {}

    @tf.function
    def sums(ds):
        total, last = 0., tf.zeros(())
        for x in ds:
            total += R("SUM", x)
            last = R("MEAN", x)
        return total, last
    out["sums"] = attempt(lambda: sums(dist))

    @tf.function
    def two_loops(ds):
        a = tf.zeros(())
        for x in ds:
            a = a + R("SUM", x)
        b = a
        for x in ds:
            b = b * 0.5 + R("MEAN", x)
        return a, b
    out["two_loops"] = attempt(lambda: two_loops(dist))

    @tf.function
    def on_iterator(it):
        first = R("SUM", next(it))
        rest = tf.zeros(())
        for x in it:
            rest = rest + R("SUM", x)
        return first, rest
    out["iterator"] = attempt(lambda: on_iterator(iter(dist)))
    it = iter(dist)
    next(it)
    out["iterator_one_batch_in"] = attempt(lambda: on_iterator(it))

    def dataset_fn(ctx):
        return tf.data.Dataset.range(7).map(lambda i: tf.fill([2], tf.cast(i, tf.float32)))
    out["from_function_sums"] = attempt(lambda: sums(st.distribute_datasets_from_function(dataset_fn)))
    empty = st.experimental_distribute_dataset(_numbers(tf, n).take(0))
    out["empty_sums"] = attempt(lambda: sums(empty))

    @tf.function
    def counter(ds):
        count = 0
        for _ in ds:
            count += 1
        return count
    out["python_counter"] = attempt(lambda: counter(dist))

    @tf.function
    def dataset_break(ds):
        a = tf.zeros(())
        for x in ds:
            a = a + R("SUM", x)
            break
        return a
    out["dataset_break"] = attempt(lambda: dataset_break(dist))

    @tf.function
    def iterator_break(it):
        a = tf.zeros(())
        for x in it:
            a = a + R("SUM", x)
            if a > 10:
                break
        return a
    it = iter(dist)
    out["iterator_tensor_break"] = attempt(lambda: iterator_break(it))
    out["iterator_after_break_next_sum"] = attempt(lambda: R("SUM", next(it)))
    return out


# ---------------------------------------------------------------- per-example outputs

@scenario("per_example_outputs", devices=(3,))
def per_example_outputs(tf, n):
    """For each batch of 0..10 batch(4) on 3 replicas (4, 4, 3 elements: 2/2/0, 2/2/0, 1/1/1
    rows), tf.functions returning experimental_local_results(run(v * 2)); a nested structure
    {"a": run(lambda v: {"d": v * 2, "s": reduce_sum(v)}), "b": [experimental_local_results(x)]};
    and, for an iterator argument, (experimental_local_results(run(v + 1, next(it))), run(v * 10))
    three calls in a row."""
    st = mirrored(tf, n)
    dist = st.experimental_distribute_dataset(_numbers(tf, n))

    @tf.function
    def local(x):
        return st.experimental_local_results(st.run(lambda v: v * 2, args=(x,)))

    @tf.function
    def nested(x):
        return {"a": st.run(lambda v: {"d": v * 2, "s": tf.reduce_sum(v)}, args=(x,)),
                "b": [st.experimental_local_results(x)]}

    @tf.function
    def taken(it):
        x = next(it)
        return st.experimental_local_results(st.run(lambda v: v + 1, args=(x,))), st.run(lambda v: v * 10, args=(x,))

    out = {"local": [], "nested": [], "taken": []}
    for batch in dist:
        out["local"].append(attempt(lambda: local(batch)))
        out["nested"].append(attempt(lambda: nested(batch)))
    it = iter(dist)
    for _ in range(3):
        out["taken"].append(attempt(lambda: taken(it)))
    return out


# ---------------------------------------------------------------- checkpoints

@scenario("checkpoint_names_flatten_to_one", devices=(1,))
def checkpoint_names_flatten_to_one(tf, n):
    """tf.train.Checkpoint(m={"a/b": v1, "a": {"b": v2}}) with v1 = 1.0, v2 = 2.0: save, set
    both to 10 and 20, restore; the values after restore and the checkpoint's keys."""
    v1, v2 = tf.Variable(1.0), tf.Variable(2.0)
    ckpt = tf.train.Checkpoint(m={"a/b": v1, "a": {"b": v2}})
    with tempfile.TemporaryDirectory() as d:
        path = ckpt.save(os.path.join(d, "ckpt"))
        v1.assign(10.0)
        v2.assign(20.0)
        ckpt.restore(path)
        keys = sorted(k for k, _ in tf.train.list_variables(path) if k.startswith("m/"))
    return {"v1": enc(v1), "v2": enc(v2), "keys": keys}


def _counter(tf, st):
    with st.scope():
        return tf.Variable(0, dtype=tf.int32, synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM)


def _int_save(tf, _n):
    n = int(os.environ["CKPT_SAVE_N"])
    tf = setup(n)
    st = mirrored(tf, n)
    c = _counter(tf, st)
    st.run(tf.function(lambda: c.assign_add(tf.where(
        tf.distribute.get_replica_context().replica_id_in_sync_group < 2, 5, 0))))
    path = tf.train.Checkpoint(c=c).save(os.path.join(os.environ["CKPT_DIR"], "ckpt"))
    return {"values_at_save": enc(c), "read_value": enc(c.read_value()), "path": path}


def _int_restore(tf, _n):
    n = int(os.environ["CKPT_RESTORE_N"])
    tf = setup(n)
    st = mirrored(tf, n)
    c = _counter(tf, st)
    tf.train.Checkpoint(c=c).restore(os.environ["CKPT_PATH"])
    return {"values_after_restore": enc(c), "read_value": enc(c.read_value())}


_common._SCENARIOS["_int_save"] = dict(fn=_int_save, devices=None, doc="")
_common._SCENARIOS["_int_restore"] = dict(fn=_int_restore, devices=None, doc="")


@scenario("checkpoint_int_sum_8to3", devices=None)
def checkpoint_int_sum_8to3(_tf, _n):
    """A sync-on-read SUM int32 counter on 8 replicas (replicas 0 and 1 add 5: total 10) is
    saved with tf.train.Checkpoint and restored on 3 replicas in another process."""
    with tempfile.TemporaryDirectory() as d:
        env = {"CKPT_DIR": d, "CKPT_SAVE_N": "8", "CKPT_RESTORE_N": "3"}
        me = os.path.abspath(__file__)
        saved = run_child(me, "_int_save", env).get("result", {})
        if "path" not in saved:
            return {"save": saved}
        env["CKPT_PATH"] = saved.pop("path")
        restored = run_child(me, "_int_restore", env)
        return {"save": saved, "restore": restored.get("result"), "num_devices_used": [8, 3],
                "tf_version": restored.get("tf_version")}


if __name__ == "__main__":
    sys.exit(main())
