"""Record how TensorFlow spells checkpoints: `Checkpoint.save(prefix)` and the paths it
returns, `tf.train.latest_checkpoint`, the status `restore` returns (`restore(None)`,
`expect_partial`, `assert_consumed`), `tf.train.CheckpointManager` (`max_to_keep`,
`checkpoints`, `latest_checkpoint`, `checkpoint_interval`, `checkpoint_number`,
`restore_or_initialize`) and shape/dtype mismatches on restore.

Writes tests/data/tf/checkpoints.json via run_all.sh. Paths are recorded by basename.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, err, main  # noqa: E402


def _base(path):
    return None if path is None else os.path.basename(path)


def _outcome(fn):
    try:
        fn()
        return "ok"
    except Exception as e:  # noqa: BLE001 -- recorded
        return err(e)


@scenario("save_prefix", devices=(1,))
def save_prefix(tf, _n):
    """Checkpoint(v).save(dir/'ckpt') twice, then save(dir/'model'); latest_checkpoint(dir)
    after each; latest_checkpoint of a missing directory."""
    d = tempfile.mkdtemp()
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    out = {"saves": [], "latest": []}
    for prefix in ("ckpt", "ckpt", "model"):
        out["saves"].append(_base(ckpt.save(os.path.join(d, prefix))))
        out["latest"].append(_base(tf.train.latest_checkpoint(d)))
    out["latest_missing_directory"] = tf.train.latest_checkpoint(os.path.join(d, "missing"))
    return out


@scenario("restore_status", devices=(1,))
def restore_status(tf, _n):
    """The status of restore(None) and of restoring a checkpoint of {v, w} into Checkpoint(v):
    each assertion's outcome; the value v gets."""
    d = tempfile.mkdtemp()
    v, w = tf.Variable(1.0), tf.Variable(2.0)
    path = tf.train.Checkpoint(v=v, w=w).save(os.path.join(d, "ckpt"))
    v.assign(5.0)
    none = tf.train.Checkpoint(v=v).restore(None)
    out = {"none": {name: _outcome(getattr(none, name)) for name in
                    ("assert_consumed", "assert_existing_objects_matched", "assert_nontrivial_match",
                     "expect_partial")},
           "none_value": float(v.numpy())}
    partial = tf.train.Checkpoint(v=v).restore(path)
    out["partial"] = {name: _outcome(getattr(partial, name)) for name in
                      ("assert_existing_objects_matched", "assert_nontrivial_match", "assert_consumed")}
    out["partial_expect_partial_returns_status"] = partial.expect_partial() is partial
    out["partial_value"] = float(v.numpy())
    return out


@scenario("restore_mismatch", devices=(1,))
def restore_mismatch(tf, _n):
    """Restoring a float32 scalar into a (2,) variable and into an int32 variable."""
    d = tempfile.mkdtemp()
    path = tf.train.Checkpoint(v=tf.Variable(1.0)).save(os.path.join(d, "ckpt"))
    out = {}
    for name, var in (("shape", tf.Variable([0.0, 0.0])), ("dtype", tf.Variable(0))):
        try:
            tf.train.Checkpoint(v=var).restore(path)
            out[name] = {"value": var.numpy().tolist()}
        except Exception as e:  # noqa: BLE001
            out[name] = err(e)
    return out


@scenario("manager", devices=(1,))
def manager(tf, _n):
    """CheckpointManager(max_to_keep=2): four saves, then save(checkpoint_number=10); the
    returned paths, `checkpoints` and `latest_checkpoint` after each; max_to_keep=0 and
    checkpoint_interval without step_counter."""
    d = tempfile.mkdtemp()
    mgr = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), d, max_to_keep=2)
    out = {"empty": {"checkpoints": mgr.checkpoints, "latest": mgr.latest_checkpoint}, "steps": []}
    for number in (None, None, None, None, 10):
        path = mgr.save(checkpoint_number=number)
        out["steps"].append({"saved": _base(path), "checkpoints": [_base(p) for p in mgr.checkpoints],
                             "latest": _base(mgr.latest_checkpoint)})
    out["files"] = sorted(os.listdir(d))
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    out["max_to_keep_0"] = _outcome(lambda: tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=0))
    out["interval_without_step_counter"] = _outcome(
        lambda: tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=3, checkpoint_interval=2))
    return out


@scenario("manager_interval", devices=(1,))
def manager_interval(tf, _n):
    """CheckpointManager(step_counter=step, checkpoint_interval=2) saving at steps 0..5, then
    save(check_interval=False); then restore_or_initialize in the same and in an empty directory."""
    d = tempfile.mkdtemp()
    step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0), step=step)
    mgr = tf.train.CheckpointManager(ckpt, d, max_to_keep=3, step_counter=step, checkpoint_interval=2)
    out = {"saves": []}
    for i in range(6):
        step.assign(i)
        out["saves"].append(_base(mgr.save()))
    out["forced"] = _base(mgr.save(check_interval=False))
    out["checkpoints"] = [_base(p) for p in mgr.checkpoints]
    out["restore_or_initialize"] = _base(mgr.restore_or_initialize())
    called = []
    empty = tf.train.CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=1, init_fn=lambda: called.append(1))
    out["restore_or_initialize_empty"] = empty.restore_or_initialize()
    out["init_fn_called"] = len(called)
    return out


if __name__ == "__main__":
    sys.exit(main())
