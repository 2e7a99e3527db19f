"""sx.Checkpoint on orbax: TensorFlow 2.21's sync-on-read restore rule (tests/data/tf/
variables.json, checkpoint_* scenarios: saved on one replica count, restored on another), what
orbax alone reads back (every variable and optimizer slot by name, against plain optax), slots
that follow their variable, TensorFlow's spelling (tests/data/tf/checkpoints.json), and
restores that check everything before they change anything."""
import json
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import strategax as sx
from conftest import assert_names_this_line, here, tensor

DATA = pathlib.Path(__file__).parent / "data/tf"
RECORDED = json.loads((DATA / "variables.json").read_text())["scenarios"]
CASES = sorted(k for k in RECORDED if k.startswith("checkpoint_"))
GAPS = json.loads((DATA / "gaps.json").read_text())["scenarios"]
TF = {k.rsplit("_r", 1)[0]: v["result"]
      for k, v in json.loads((DATA / "checkpoints.json").read_text())["scenarios"].items()}


def orbax_alone(path):
    """The checkpoint as orbax reads it without strategax: a nested dict of host arrays."""
    return jax.tree_util.tree_map(np.asarray, ocp.StandardCheckpointer().restore(path))


def make_var(n, sync, agg, value=0.0):
    st = sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])
    with st.scope():
        v = sx.Variable(value, synchronization=sync, aggregation=agg)
    return st, v


@pytest.mark.parametrize("case", CASES)
def test_restore_rule_matches_tensorflow(case, tmp_path):
    # Intent: SUM sync-on-read values are stored as their aggregate and divided by the new
    # replica count on restore, MEAN assigned as is, as TensorFlow does.
    rec = RECORDED[case]["result"]
    sync, agg = rec["save"]["variable"]["synchronization"], rec["save"]["variable"]["aggregation"]
    st, v = make_var(rec["save_devices"], sync, agg)

    def fn():
        r = sx.get_replica_context().replica_id_in_sync_group.astype(jnp.float32) + 1.0
        if sync == "ON_READ":
            return v.assign(r)
        return v.assign(sx.get_replica_context().all_reduce("SUM", r))
    st.run(fn)
    for got, want in zip(v.values, rec["save"]["values_at_save"]["values"]):
        np.testing.assert_allclose(np.asarray(got), tensor(want))
    path = sx.Checkpoint(v=v).save(str(tmp_path))
    np.testing.assert_allclose(orbax_alone(path)["v"],
                               tensor(rec["save"]["stored_in_checkpoint"]["v/.ATTRIBUTES/VARIABLE_VALUE"]))

    _, fresh = make_var(rec["restore_devices"], sync, agg)
    sx.Checkpoint(v=fresh).restore(path)
    after = rec["restore"]["after_restore"]
    assert len(fresh.values) == len(after["values"])
    for got, want in zip(fresh.values, after["values"]):
        np.testing.assert_allclose(np.asarray(got), tensor(want))
    np.testing.assert_allclose(np.asarray(fresh.read_value()), tensor(after["read_value"]))


# --- a small model with Adam, and the same in plain optax ---------------------------------------
INIT = {"w": np.array([[0.5, -1.0], [2.0, 0.25]], np.float32), "b": np.array([0.1, -0.2], np.float32)}
GRADS = [{"w": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), "b": np.array([0.5, -1.5], np.float32)},
         {"w": np.array([[-2.0, 0.5], [1.0, -1.0]], np.float32), "b": np.array([2.0, 1.0], np.float32)},
         {"w": np.array([[0.3, 0.3], [-0.7, 2.0]], np.float32), "b": np.array([-1.0, 0.25], np.float32)}]
TX = optax.adam(0.1)


def optax_reference(steps):
    """Plain optax on one device: parameters and Adam state after `steps` steps."""
    params = {k: jnp.asarray(v) for k, v in INIT.items()}
    state = TX.init(params)
    for g in GRADS[:steps]:
        updates, state = TX.update({k: jnp.asarray(v) for k, v in g.items()}, state, params)
        params = optax.apply_updates(params, updates)
    return params, state[0]


def adam_model(strategy):
    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in INIT.items()}
        opt = sx.Optimizer(TX)
    return params, opt


def apply(params, opt, step, order=("w", "b")):
    """One cross-replica update with step `step`'s gradients, the pairs in `order`."""
    opt.apply_gradients([(jnp.asarray(GRADS[step][k]), params[k]) for k in order])


def test_orbax_alone_reads_every_variable_and_slot_by_name(tmp_path):
    # Intent: the stored tree is {names given to sx.Checkpoint: value}, optimizer slots under
    # their variable's path and the optax state path; orbax reads it with no strategax code.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    params, opt = adam_model(st)
    for i in range(2):
        apply(params, opt, i)
    path = sx.Checkpoint(model={"params": params}, optimizer=opt).save(str(tmp_path))
    want_params, adam = optax_reference(2)
    got = orbax_alone(path)
    assert set(got) == {"model", "optimizer"} and set(got["optimizer"]) == {"iterations", "slots"}
    assert int(got["optimizer"]["iterations"]) == 2
    for k in INIT:
        np.testing.assert_allclose(got["model"]["params"][k], want_params[k], rtol=1e-6)
        slots = got["optimizer"]["slots"]["model"]["params"][k]["0"]
        assert set(slots) == {"count", "mu", "nu"}
        np.testing.assert_allclose(slots["mu"], adam.mu[k], rtol=1e-6)
        np.testing.assert_allclose(slots["nu"], adam.nu[k], rtol=1e-6)
        assert int(slots["count"]) == int(adam.count)


def test_restored_slots_follow_their_variable_whatever_the_call_order(tmp_path):
    # Intent: slots are keyed by variable, not by call order: restored into a fresh optimizer
    # whose first step lists the pairs the other way round, Adam's moments stay with their
    # variable (the old `slots/{group}/{j}` keys swapped them).
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    params, opt = adam_model(st)
    apply(params, opt, 0, order=("w", "b"))
    path = sx.Checkpoint(params=params, optimizer=opt).save(str(tmp_path))

    params2, opt2 = adam_model(st)
    sx.Checkpoint(params=params2, optimizer=opt2).restore(path).assert_consumed()
    apply(params2, opt2, 1, order=("b", "w"))
    apply(params2, opt2, 2, order=("w", "b"))
    want, _ = optax_reference(3)
    for k in INIT:
        np.testing.assert_allclose(params2[k].numpy(), want[k], rtol=1e-6, err_msg=k)


def test_optimizer_rejects_an_overlapping_set_of_variables():
    # Intent: optax state belongs to the set of variables of an apply_gradients call: a later
    # call with another set sharing a variable would silently start that variable's moments
    # afresh, so it raises, naming the variable and this line; the same set in another order
    # is the same state.
    params, opt = adam_model(sx.MirroredStrategy(["CPU:0", "CPU:1"]))
    apply(params, opt, 0, order=("w", "b"))
    apply(params, opt, 1, order=("b", "w"))
    line = here() + 2
    with pytest.raises(sx.DistributionValueError, match="already keeps state for w") as err:
        opt.apply_gradients([(jnp.asarray(GRADS[2]["w"]), params["w"])])
    assert_names_this_line(err, line)


@pytest.mark.parametrize("objects,names", [
    ({"a.b": 1.0, "a": {"b": 2.0}}, (["a.b"], ["a", "b"])),
    ({"m": {"a/b": 1.0, "a": {"b": 2.0}}}, (["m", "a/b"], ["m", "a", "b"])),
    ({"x/y.z": 1.0, "x": [2.0], "x.y": {"z": 3.0}}, (["x/y.z"], ["x.y", "z"])),
])
def test_save_rejects_names_that_flatten_to_one(objects, names, tmp_path):
    # Intent: {"a.b": v1, "a": {"b": v2}} is one orbax entry (a.b), and "a/b" is one name
    # wherever "/" separates levels (TensorFlow's names, storage paths): an error at save time
    # naming both, and nothing is written. TensorFlow escapes "/" and keeps both
    # (tests/data/tf/gaps.json); strategax refuses the ambiguous names rather than risk one.
    objects = jax.tree_util.tree_map(sx.Variable, objects)
    line = here() + 2
    with pytest.raises(sx.CheckpointError, match="flatten to one name") as err:
        sx.Checkpoint(**objects).save(str(tmp_path))
    assert_names_this_line(err, line)
    assert all(str(name) in str(err.value) for name in names), str(err.value)
    assert os.listdir(tmp_path) == []
    tf = GAPS["checkpoint_names_flatten_to_one_r1"]["result"]
    assert tensor(tf["v1"]) == 1.0 and tensor(tf["v2"]) == 2.0 and len(tf["keys"]) == 2


def test_integer_sum_counter_keeps_its_total_on_fewer_replicas(tmp_path):
    # Intent: a sync-on-read SUM int32 counter of 10 saved on 8 replicas and restored on 3:
    # TensorFlow gives each copy 10 // 3 and reads 9 (recorded); strategax puts the remainder
    # on replica 0 (4, 3, 3) and reads 10. A cross-replica assign, eager or compiled, splits the
    # same way.
    rec = GAPS["checkpoint_int_sum_8to3"]["result"]
    st8, c = make_var(8, "ON_READ", "SUM", np.int32(0))
    st8.run(lambda: c.assign_add(jnp.where(sx.get_replica_context().replica_id_in_sync_group < 2, 5, 0)))
    assert [int(np.asarray(x)) for x in c.values] == [tensor(v) for v in rec["save"]["values_at_save"]["values"]]
    path = sx.Checkpoint(c=c).save(str(tmp_path))
    st3, fresh = make_var(3, "ON_READ", "SUM", np.int32(0))
    sx.Checkpoint(c=fresh).restore(path)
    assert [tensor(v) for v in rec["restore"]["values_after_restore"]["values"]] == [3, 3, 3]
    assert tensor(rec["restore"]["read_value"]) == 9
    assert [int(np.asarray(x)) for x in fresh.values] == [4, 3, 3]
    assert int(fresh.read_value()) == tensor(rec["save"]["read_value"]) == 10
    fresh.assign(-7)  # floor division: -3 each, replica 0 -1
    assert [int(np.asarray(x)) for x in fresh.values] == [-1, -3, -3]
    st3.function(lambda v: fresh.assign(v))(jnp.int32(11))
    assert [int(np.asarray(x)) for x in fresh.values] == [5, 3, 3] and int(fresh.read_value()) == 11


def test_save_rejects_keys_that_are_not_strings(tmp_path):
    # Intent: a non-string key cannot be a name: an error, never a silent str() or drop.
    with pytest.raises(sx.CheckpointError, match="key 1 at params is not a non-empty string"):
        sx.Checkpoint(params={1: sx.Variable(1.0)}).save(str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_names_numpy_savez_swallowed_round_trip(tmp_path):
    # Intent: `allow_pickle` and `file` (swallowed or crashing in np.savez) are ordinary names.
    a, f = sx.Variable(3.0), sx.Variable([1.0, 2.0])
    path = sx.Checkpoint(allow_pickle=a, file=f).save(str(tmp_path))
    a.assign(0.0)
    f.assign([0.0, 0.0])
    sx.Checkpoint(allow_pickle=a, file=f).restore(path).assert_consumed()
    assert float(a.numpy()) == 3.0 and f.numpy().tolist() == [1.0, 2.0]
    assert orbax_alone(path)["allow_pickle"] == 3.0


def test_optimizer_slots_need_their_variable_in_the_checkpoint(tmp_path):
    # Intent: a slot is stored under its variable's name, so a Checkpoint holding the
    # optimizer without that variable cannot store it faithfully.
    params, opt = adam_model(sx.MirroredStrategy(["CPU:0", "CPU:1"]))
    apply(params, opt, 0)
    with pytest.raises(sx.CheckpointError, match="keeps state for variable 'w'"):
        sx.Checkpoint(b=params["b"], optimizer=opt).save(str(tmp_path))


# --- restore checks everything first --------------------------------------------------------
def saved_pair(tmp_path):
    a, b = sx.Variable([1.0, 2.0], name="a"), sx.Variable(3.0, name="b")
    return sx.Checkpoint(a=a, b=b).save(str(tmp_path))


@pytest.mark.parametrize("value, message", [
    (np.zeros((3,), np.float32), r"b is float32\[\] in the checkpoint but float32\[3\] here"),
    (np.int32(0), r"b is float32\[\] in the checkpoint but int32\[\] here"),
], ids=["shape", "dtype"])
def test_mismatched_restore_raises_and_changes_nothing(request, tmp_path, value, message):
    # Intent: a shape or dtype mismatch (which assign would broadcast or cast; TensorFlow
    # refuses both, recorded) is an sx.CheckpointError naming the path and the entry, raised
    # before `a` (checked first and valid) is assigned.
    assert "error" in TF["restore_mismatch"][request.node.callspec.id]
    path = saved_pair(tmp_path)
    a, b = sx.Variable([7.0, 7.0]), sx.Variable(value)
    line = here() + 2
    with pytest.raises(sx.CheckpointError, match=message) as err:
        sx.Checkpoint(a=a, b=b).restore(path)
    assert path in str(err.value) and isinstance(err.value, ValueError)
    assert_names_this_line(err, line)
    assert a.numpy().tolist() == [7.0, 7.0] and np.asarray(b.numpy()).tolist() == value.tolist()


def test_restore_names_missing_values(tmp_path):
    # Intent: restoring into objects the checkpoint does not describe raises, saying what is missing.
    path = saved_pair(tmp_path)
    a, b, c = sx.Variable([0.0, 0.0]), sx.Variable(0.0), sx.Variable(5.0)
    with pytest.raises(sx.CheckpointError, match="has no value for c"):
        sx.Checkpoint(a=a, b=b, c=c).restore(path)
    assert a.numpy().tolist() == [0.0, 0.0] and float(c.numpy()) == 5.0


def test_restore_rejects_another_optax_transformation(tmp_path):
    # Intent: slots saved from Adam do not restore into an SGD-with-momentum optimizer: the
    # message lists both structures; nothing changes, no slot is kept for later.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    params, opt = adam_model(st)
    apply(params, opt, 0)
    path = sx.Checkpoint(params=params, optimizer=opt).save(str(tmp_path))
    with st.scope():
        fresh = {k: sx.Variable(np.zeros_like(v), name=k) for k, v in INIT.items()}
        sgd = sx.Optimizer(optax.sgd(0.1, momentum=0.9))
    with pytest.raises(sx.CheckpointError,
                       match=r"holds \['0/count', '0/mu', '0/nu'\], this optimizer keeps \['0/trace'\]"):
        sx.Checkpoint(params=fresh, optimizer=sgd).restore(path)
    assert all(not fresh[k].numpy().any() for k in INIT) and not sgd._pending


def first_data_file(path):
    data = sorted(p for p in pathlib.Path(path).rglob("*") if p.is_file() and p.parent.name == "d")
    return max(data, key=lambda p: p.stat().st_size)


def flip_byte(path):
    f = first_data_file(path)
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    f.write_bytes(bytes(raw))


DAMAGE = {
    "flipped_data_byte": (flip_byte, "does not read back as it was written"),
    "truncated_data_file": (lambda p: first_data_file(p).write_bytes(first_data_file(p).read_bytes()[:7]),
                            "is damaged"),
    "missing_manifest": (lambda p: os.remove(os.path.join(p, "manifest.ocdbt")), "is damaged"),
    "garbled_metadata": (lambda p: pathlib.Path(p, "_METADATA").write_bytes(b"\x9c{not json"), "is damaged"),
    "garbled_strategax_record": (lambda p: pathlib.Path(p, "strategax.json").write_text("{"),
                                 "not a strategax checkpoint"),
    "emptied": (lambda p: [shutil.rmtree(p), os.mkdir(p)], "is not a checkpoint"),
    "replaced_by_a_file": (lambda p: [shutil.rmtree(p), pathlib.Path(p).write_text("x")], "is not a checkpoint"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_checkpoint_raises_checkpoint_error_and_changes_nothing(tmp_path, damage):
    # Intent: every kind of damage is an sx.CheckpointError naming the path (never an orbax,
    # tensorstore or json traceback, never a silently wrong value), and the variables keep
    # their values.
    v = sx.Variable(np.arange(4096, dtype=np.float32))
    path = sx.Checkpoint(v=v).save(str(tmp_path))
    do, message = DAMAGE[damage]
    do(path)
    v.assign(np.zeros(4096, np.float32))
    with pytest.raises(sx.CheckpointError, match=message) as err:
        sx.Checkpoint(v=v).restore(path)
    assert path in str(err.value)
    assert not v.numpy().any()


# --- TensorFlow's spelling ----------------------------------------------------------------
def test_save_prefix_numbers_like_tensorflow(tmp_path):
    # Intent: save(prefix) writes prefix-N, numbered as TensorFlow numbers them (recorded), and
    # latest_checkpoint(directory) finds the newest whatever its prefix; save(directory) writes
    # directory/ckpt-N into the same sequence.
    rec = TF["save_prefix"]
    ckpt = sx.Checkpoint(v=sx.Variable(1.0))
    saves, latest = [], []
    for prefix in ("ckpt", "ckpt", "model"):
        saves.append(os.path.basename(ckpt.save(str(tmp_path / prefix))))
        latest.append(os.path.basename(sx.latest_checkpoint(str(tmp_path))))
    assert (saves, latest) == (rec["saves"], rec["latest"])
    assert ckpt.save(str(tmp_path)) == str(tmp_path / "ckpt-4")
    assert sx.latest_checkpoint(str(tmp_path / "missing")) is rec["latest_missing_directory"]


def test_restore_status_like_tensorflow(tmp_path):
    # Intent: restore(None) restores nothing and its assertions fail as TensorFlow's do;
    # restoring a {v, w} checkpoint into Checkpoint(v) restores v, and only assert_consumed
    # fails (w was not taken); expect_partial returns the status (recorded).
    rec = TF["restore_status"]
    v, w = sx.Variable(1.0), sx.Variable(2.0)
    path = sx.Checkpoint(v=v, w=w).save(str(tmp_path / "ckpt"))
    v.assign(5.0)
    none = sx.Checkpoint(v=v).restore(None)
    for name, want in rec["none"].items():
        if want == "ok":
            getattr(none, name)()
        else:
            with pytest.raises(AssertionError, match=want["message"].replace("(", r"\(").replace(")", r"\)")):
                getattr(none, name)()
    assert float(v.numpy()) == rec["none_value"]
    status = sx.Checkpoint(v=v).restore(path)
    for name, want in rec["partial"].items():
        if want == "ok":
            getattr(status, name)()
        else:
            with pytest.raises(AssertionError, match="w"):
                getattr(status, name)()
    assert (status.expect_partial() is status) == rec["partial_expect_partial_returns_status"]
    assert float(v.numpy()) == rec["partial_value"]


def test_restore_of_a_directory_points_to_latest_checkpoint(tmp_path):
    # Intent: a directory of checkpoints is not one checkpoint: the error says to use
    # sx.latest_checkpoint.
    v = sx.Variable(1.0)
    sx.Checkpoint(v=v).save(str(tmp_path))
    with pytest.raises(sx.CheckpointError, match="directory of checkpoints") as err:
        sx.Checkpoint(v=v).restore(str(tmp_path))
    assert "sx.latest_checkpoint(directory)" in str(err.value)


def test_latest_checkpoint_never_follows_a_link_out_of_its_directory(tmp_path):
    # Intent: a link named like a newer checkpoint, pointing elsewhere, is ignored.
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    own = sx.Checkpoint(v=sx.Variable(1.0)).save(str(inside) + os.sep)
    foreign = sx.Checkpoint(v=sx.Variable(2.0)).save(str(outside) + os.sep)
    os.symlink(foreign, inside / "ckpt-99")
    assert sx.latest_checkpoint(str(inside)) == own


def test_relative_paths_are_taken_from_the_working_directory(tmp_path, monkeypatch):
    # Intent: TensorFlow accepts relative checkpoint paths (orbax alone refuses them): save(prefix),
    # a manager's directory, latest_checkpoint and restore all resolve them against the working
    # directory when called, and the values round-trip (NumPy's own values as the reference).
    monkeypatch.chdir(tmp_path)
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    with st.scope():
        v = sx.Variable(values)
    checkpoint = sx.Checkpoint(v=v)
    path = checkpoint.save("training/ckpt")
    assert path == os.path.join("training", "ckpt-1") and (tmp_path / "training" / "ckpt-1").is_dir()
    manager = sx.CheckpointManager(checkpoint, "managed", max_to_keep=1)
    assert manager.save() == os.path.join("managed", "ckpt-1")
    v.assign(np.zeros((2, 3), np.float32))
    checkpoint.restore(sx.latest_checkpoint("training"))
    np.testing.assert_array_equal(np.asarray(v.numpy()), values)
    v.assign(np.zeros((2, 3), np.float32))
    assert manager.restore_or_initialize() == os.path.join("managed", "ckpt-1")
    np.testing.assert_array_equal(np.asarray(v.numpy()), values)
    np.testing.assert_array_equal(orbax_alone(str(tmp_path / "managed" / "ckpt-1"))["v"], values)
