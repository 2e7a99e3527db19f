"""sx.Checkpoint: TensorFlow 2.21's sync-on-read restore rule (tests/data/tf/variables.json,
checkpoint_* scenarios: saved on one replica count, restored on another) and atomic writes."""
import json
import os
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/variables.json").read_text())["scenarios"]
CASES = sorted(k for k in RECORDED if k.startswith("checkpoint_"))


def tensor(rec):
    return np.asarray(rec["value"], dtype=rec["dtype"]).reshape(rec["shape"])


def make_var(n, sync, agg):
    st = sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])
    with st.scope():
        v = sx.Variable(0.0, synchronization=sync, aggregation=agg)
    return st, v


@pytest.mark.parametrize("case", CASES)
def test_restore_rule_matches_tensorflow(case, tmp_path):
    # Intent: SUM sync-on-read values are divided by the new replica count, MEAN assigned as is.
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
    stored = np.load(path)["v"]
    np.testing.assert_allclose(stored, tensor(rec["save"]["stored_in_checkpoint"]["v/.ATTRIBUTES/VARIABLE_VALUE"]))

    _, fresh = make_var(rec["restore_devices"], sync, agg)
    sx.Checkpoint(v=fresh).restore(path)
    after = rec["restore"]["after_restore"]
    assert len(fresh.values) == len(after["values"])
    for got, want in zip(fresh.values, after["values"]):
        np.testing.assert_allclose(np.asarray(got), tensor(want))
    np.testing.assert_allclose(np.asarray(fresh.read_value()), tensor(after["read_value"]))


def test_crash_mid_save_leaves_previous_checkpoint(tmp_path, monkeypatch):
    # Intent: a save that dies while writing leaves the last complete checkpoint current and intact.
    st, v = make_var(2, "ON_WRITE", "NONE")
    ckpt = sx.Checkpoint(v=v)
    v.assign(1.0)
    first = ckpt.save(str(tmp_path))
    v.assign(2.0)

    def dying_savez(f, **arrays):
        f.write(b"partial")
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", dying_savez)
    with pytest.raises(OSError):
        ckpt.save(str(tmp_path))
    monkeypatch.undo()
    assert sx.latest_checkpoint(str(tmp_path)) == first
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1.npz"]
    ckpt.restore(first)
    assert float(v.numpy()) == 1.0
    second = ckpt.save(str(tmp_path))
    assert second.endswith("ckpt-2.npz") and sx.latest_checkpoint(str(tmp_path)) == second


def test_restore_names_missing_values(tmp_path):
    # Intent: restoring into objects the checkpoint does not describe raises, saying what is missing.
    _, v = make_var(2, "ON_WRITE", "NONE")
    path = sx.Checkpoint(v=v).save(str(tmp_path))
    with pytest.raises(ValueError, match="no value for w"):
        sx.Checkpoint(v=v, w=make_var(2, "ON_WRITE", "NONE")[1]).restore(path)
