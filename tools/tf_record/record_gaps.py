"""Record TensorFlow's behaviour for issue 25 ("TensorFlow's last gaps"): hostile inputs
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
