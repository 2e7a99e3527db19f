"""sx.CheckpointManager against tf.train.CheckpointManager (tests/data/tf/checkpoints.json):
the paths `save` returns, `checkpoints` and `latest_checkpoint` under `max_to_keep`,
`checkpoint_number`, `checkpoint_interval`, `restore_or_initialize`, the constructor's errors;
a manager reopened on its directory; async saves that hold the values of the moment they were
made while training goes on."""
import json
import os
import pathlib

import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import strategax as sx

TF = {k.rsplit("_r", 1)[0]: v["result"] for k, v in
      json.loads((pathlib.Path(__file__).parent / "data/tf/checkpoints.json").read_text())["scenarios"].items()}


def names(paths):
    return [os.path.basename(p) for p in paths]


def base(path):
    return None if path is None else os.path.basename(path)


def test_manager_keeps_the_newest_like_tensorflow(tmp_path):
    # Intent: max_to_keep=2 over four saves and save(checkpoint_number=10): the same returned
    # names, `checkpoints` and `latest_checkpoint` after each save as TensorFlow (recorded),
    # and the same folders left on disk.
    rec = TF["manager"]
    mgr = sx.CheckpointManager(sx.Checkpoint(v=sx.Variable(1.0)), str(tmp_path), max_to_keep=2)
    assert (mgr.checkpoints, mgr.latest_checkpoint) == (rec["empty"]["checkpoints"], rec["empty"]["latest"])
    for number, want in zip((None, None, None, None, 10), rec["steps"]):
        saved = mgr.save(checkpoint_number=number)
        got = {"saved": base(saved), "checkpoints": names(mgr.checkpoints), "latest": base(mgr.latest_checkpoint)}
        assert got == want
    assert sorted(os.listdir(tmp_path)) == sorted({f.split(".")[0] for f in rec["files"] if f != "checkpoint"})


def test_manager_interval_and_restore_or_initialize_like_tensorflow(tmp_path):
    # Intent: with step_counter and checkpoint_interval=2, save() at steps 0..5 saves every
    # other step (None otherwise), check_interval=False forces one; restore_or_initialize
    # restores the latest, or calls init_fn in an empty directory (recorded).
    rec = TF["manager_interval"]
    step = sx.Variable(0, dtype=jnp.int32)
    ckpt = sx.Checkpoint(v=sx.Variable(1.0), step=step)
    mgr = sx.CheckpointManager(ckpt, str(tmp_path), max_to_keep=3, step_counter=step, checkpoint_interval=2)
    saves = []
    for i in range(6):
        step.assign(i)
        saves.append(base(mgr.save()))
    assert saves == rec["saves"]
    assert base(mgr.save(check_interval=False)) == rec["forced"]
    assert names(mgr.checkpoints) == rec["checkpoints"]
    step.assign(100)
    assert base(mgr.restore_or_initialize()) == rec["restore_or_initialize"]
    assert int(step.numpy()) == 5
    called = []
    empty = sx.CheckpointManager(ckpt, str(tmp_path / "empty"), max_to_keep=1, init_fn=lambda: called.append(1))
    assert empty.restore_or_initialize() is rec["restore_or_initialize_empty"]
    assert len(called) == rec["init_fn_called"]


@pytest.mark.parametrize("kwargs, case", [
    ({"max_to_keep": 0}, "max_to_keep_0"),
    ({"max_to_keep": 3, "checkpoint_interval": 2}, "interval_without_step_counter")])
def test_manager_rejects_what_tensorflow_rejects(tmp_path, kwargs, case):
    # Intent: the constructor's errors are TensorFlow's (ValueErrors with its message).
    want = TF["manager"][case]
    with pytest.raises(ValueError) as err:
        sx.CheckpointManager(sx.Checkpoint(v=sx.Variable(1.0)), str(tmp_path), **kwargs)
    assert want["message"] in str(err.value) and want["error"] == "ValueError"


def test_reopened_manager_sees_and_trims_existing_checkpoints(tmp_path):
    # Intent: a new manager (a restarted program) lists the checkpoints already in the
    # directory, numbers after them, and trims them to its max_to_keep.
    v = sx.Variable(1.0)
    first = sx.CheckpointManager(sx.Checkpoint(v=v), str(tmp_path), max_to_keep=5)
    for _ in range(3):
        first.save()
    again = sx.CheckpointManager(sx.Checkpoint(v=v), str(tmp_path), max_to_keep=2)
    assert names(again.checkpoints) == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert base(again.save()) == "ckpt-4"
    assert names(again.checkpoints) == ["ckpt-3", "ckpt-4"]


def test_async_save_holds_the_values_of_its_moment_while_training_goes_on(tmp_path):
    # Intent: with async_save, save() returns before the write completes; training steps that
    # change (and donate) the variables meanwhile do not leak into it: after sync() the
    # checkpoint holds the values at save time (compared with plain optax).
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    w0 = np.linspace(-1.0, 1.0, 64 * 64, dtype=np.float32).reshape(64, 64)
    with st.scope():
        w = sx.Variable(w0, name="w")
        opt = sx.Optimizer(optax.sgd(0.1))

    @st.function
    def step():
        def replica():
            opt.apply_gradients([(jnp.ones((64, 64)) * 0.5, w)])  # summed over 2 replicas: 1.0
        st.run(replica)
    mgr = sx.CheckpointManager(sx.Checkpoint(w=w, optimizer=opt), str(tmp_path), max_to_keep=2, async_save=True)
    step()
    paths = [mgr.save()]
    for _ in range(3):
        step()
    paths.append(mgr.save())  # waits for the first save, then starts the second
    step()
    mgr.sync()
    assert names(mgr.checkpoints) == ["ckpt-1", "ckpt-2"] and paths == mgr.checkpoints
    for path, steps in zip(paths, (1, 4)):
        stored = ocp.StandardCheckpointer().restore(path)
        np.testing.assert_array_equal(np.asarray(stored["w"]), sgd_reference(w0, steps))
        assert int(stored["optimizer"]["iterations"]) == steps
    np.testing.assert_array_equal(w.numpy(), sgd_reference(w0, 5))


def sgd_reference(w0, steps):
    """Plain optax on one device: `steps` SGD steps with gradient 1.0."""
    tx, w = optax.sgd(0.1), jnp.asarray(w0)
    state = tx.init(w)
    for _ in range(steps):
        updates, state = tx.update(jnp.ones_like(w), state, w)
        w = optax.apply_updates(w, updates)
    return np.asarray(w)
