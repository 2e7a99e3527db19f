"""`sx.Optimizer(tx, loss_scale=...)` against TensorFlow 2.21's LossScaleOptimizer, recorded by
tools/tf_record/record_loss_scale.py into tests/data/tf/loss_scale.json (the model: float32
weights w, replica r's float16 row x_r, per-replica loss w16 . x_r, SGD(0.125) on the
all-reduced unscaled gradient; an 8 in a row overflows float16 for scales 2**15 .. 2**13).

strategax follows tf_keras (the API with get_scaled_loss / get_unscaled_gradients), which
all-reduces the gradients before it checks them: an overflow on any replica skips the step on
every replica. TF 2.21's default Keras 3 optimizer checks replica 0's own gradients only and
applies an inf step when only another replica overflows (recorded as keras3_*): a deliberate
difference (docs/porting.md section 6.8).

The float16 casts stay outside the differentiated function (`jnp.dot`, not `jnp.sum`, whose
float32 accumulation is a cast): the gradient is scale * x_r in float16 either way.
"""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from conftest import assert_names_this_line, here, tensor

import strategax as sx

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/loss_scale.json").read_text())["scenarios"]
LR = 0.125
W0 = [1.0, 2.0]
NORMAL = [[0.25, 0.5], [0.5, 0.25]]


def recorded(name):
    rec = RECORDED[name]
    assert rec["tf_version"].startswith("2.21"), rec
    return rec["result"]


def mirrored(n):
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(n)])


class Trainer:
    """The recorded model: rows[0] goes to replica 0, rows[1] to the last replica, zeros to the
    others (so the all-reduced gradient is the same on 2 and on 8 replicas)."""

    def __init__(self, strategy, loss_scale="dynamic", tx=None, w=W0):
        self.strategy = strategy
        with strategy.scope():
            self.w = sx.Variable(w, name="w")
            self.opt = sx.Optimizer(tx or optax.sgd(LR), loss_scale=loss_scale)

        def replica_step(x):
            w16 = self.w.read_value().astype(jnp.float16)
            g16 = jax.grad(lambda w16: self.opt.get_scaled_loss(jnp.dot(w16, x)))(w16)
            (g,) = self.opt.get_unscaled_gradients([g16.astype(jnp.float32)])
            self.opt.apply_gradients([(g, self.w)])

        @strategy.function
        def steps(x, n):
            for _ in sx.range(n):
                strategy.run(replica_step, args=(x,))
        self._steps = steps

    def run(self, rows, n=1):
        last = self.strategy.num_replicas_in_sync - 1
        placed = {0: rows[0], last: rows[1]}
        x = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: jnp.asarray(placed.get(ctx.replica_id_in_sync_group, [0.0, 0.0]), jnp.float16))
        self._steps(x, jnp.int32(n))  # n traced: one program for every count

    def state(self) -> dict:
        counter = self.opt.dynamic_counter
        return {"w": [np.asarray(c) for c in self.w.values], "loss_scale": float(self.opt.loss_scale),
                "good_steps": None if counter is None else int(counter.numpy()),
                "iterations": int(self.opt.iterations.numpy())}


def assert_state(got, want):
    """strategax's state after a step equals TensorFlow's (every replica's copy of w)."""
    for component in got["w"]:
        np.testing.assert_array_equal(component, tensor(want["w"]["values"][0]))
    assert {k: got[k] for k in ("loss_scale", "good_steps", "iterations")} == \
        {k: want[k] for k in ("loss_scale", "good_steps", "iterations")}


@pytest.mark.parametrize("replicas", [2, 8])
@pytest.mark.parametrize("which", ["replica0", "replica1"])
def test_overflow_on_any_replica_skips_the_step_on_all_and_halves_the_scale(which, replicas):
    # Intent: issue 24's "Done when": an overflowing float16 step is skipped on every replica
    # and the scale halves (2**15 -> 2**12 over three skipped steps, then the step applies), as
    # tf_keras 2.21 records it, whichever replica overflows (on 8: replica 0 or replica 7).
    rec = recorded(f"tf_keras_overflow_{which}_r2")
    trainer = Trainer(mirrored(replicas))
    assert float(trainer.opt.loss_scale) == 2.0 ** 15 and trainer.opt.dynamic
    assert (trainer.opt.initial_scale, trainer.opt.dynamic_growth_steps) == (2.0 ** 15, 2000)
    for rows, want in zip(rec["data"], rec["after_each_step"]):
        trainer.run(rows)
        assert_state(trainer.state(), want)
    assert [s["loss_scale"] for s in rec["after_each_step"]] == [2.0 ** 15, 2.0 ** 14, 2.0 ** 13, 2.0 ** 12,
                                                                 2.0 ** 12, 2.0 ** 12]


def test_keras3_records_the_difference():
    # Intent: what TF 2.21's default (Keras 3) LossScaleOptimizer does, kept honest: with the
    # overflow on replica 0 it skips as strategax does (its iterations do not count skipped
    # steps); with the overflow on replica 1 only it applies the inf step (w[1] = -inf) where
    # strategax skips (test above). docs/porting.md 6.8 states this difference.
    right = recorded("keras3_overflow_replica0_r2")["after_each_step"]
    skipping = recorded("tf_keras_overflow_replica0_r2")["after_each_step"]
    for k3, tfk in zip(right, skipping):
        assert (k3["loss_scale"], k3["good_steps"], k3["w"]) == (tfk["loss_scale"], tfk["good_steps"], tfk["w"])
    assert [s["iterations"] for s in right] == [1, 1, 1, 1, 2, 3]
    wrong = recorded("keras3_overflow_replica1_r2")["after_each_step"][1]
    assert tensor(wrong["w"]["values"][0]).tolist() == [0.8125, -np.inf]
    assert wrong["loss_scale"] == 2.0 ** 15
    trainer = Trainer(mirrored(2))
    trainer.run(NORMAL)
    trainer.run(recorded("keras3_overflow_replica1_r2")["data"][1])
    assert np.asarray(trainer.w.values[1]).tolist() == [0.90625, 1.90625]  # skipped: w as after step 1
    assert float(trainer.opt.loss_scale) == 2.0 ** 14


def test_the_scale_doubles_after_2000_good_steps():
    # Intent: TF's recorded sequence (tf_keras and Keras 3 agree): one overflow, then the scale
    # doubles at the 2000th good step in a row and again 2000 steps later; the counter runs
    # 0..1999. Run as sx.range loops (one program for every chunk).
    rec = recorded("tf_keras_growth_r2")["state_after_step"]
    assert recorded("keras3_growth_r2")["state_after_step"]["4001"]["loss_scale"] == rec["4001"]["loss_scale"]
    trainer = Trainer(mirrored(2))
    done = 0
    for total in sorted(rec, key=int):
        trainer.run([[8.0, 0.5], [0.5, 0.25]] if total == "1" else NORMAL, int(total) - done)
        done = int(total)
        got = trainer.state()
        del got["w"]
        assert got == rec[total], total
    assert len(trainer._steps._cache) == 1


def test_halving_stops_at_one():
    # Intent: tf_keras halves to at least 1 (recorded from initial scale 4: 2, 1, 1, 1); from
    # 2**15 that is 15 NaN steps, and further NaN steps keep 1. (Keras 3 goes on to 0.5, 0.25.)
    floor = [s["loss_scale"] for s in recorded("tf_keras_floor_r2")["after_each_step"]]
    assert floor == [max(4.0 / 2 ** k, 1.0) for k in range(1, 5)]
    assert [s["loss_scale"] for s in recorded("keras3_floor_r2")["after_each_step"]] == [2.0, 1.0, 0.5, 0.25]
    trainer = Trainer(mirrored(2))
    nan_rows = [[float("nan"), 0.5], [0.5, 0.25]]
    for k in range(1, 18):
        trainer.run(nan_rows)
        assert float(trainer.opt.loss_scale) == max(2.0 ** 15 / 2 ** k, 1.0), k
    assert trainer.state()["iterations"] == 17 and trainer.state()["good_steps"] == 0
    np.testing.assert_array_equal(trainer.state()["w"][0], W0)


def test_a_fixed_scale_never_skips():
    # Intent: loss_scale=<number> is tf_keras' dynamic=False: the scale stays, and an
    # overflowing step is applied as it is (w[1] = -inf), as recorded.
    rec = recorded("tf_keras_fixed_overflow_replica1_r2")
    trainer = Trainer(mirrored(2), loss_scale=2.0 ** 15)
    assert not trainer.opt.dynamic and trainer.opt.dynamic_growth_steps is None
    for rows, want in zip(rec["data"], rec["after_each_step"]):
        trainer.run(rows)
        assert_state(trainer.state(), want)


def test_a_skipped_step_keeps_the_optimizer_state():
    # Intent: with Adam on 8 replicas, an overflow on replica 7 only skips the whole update:
    # weights and Adam's moments and count are those of plain optax applying only the good
    # steps on one device (the unscaled gradients are exact: powers of 2 and eighths).
    trainer = Trainer(mirrored(8), tx=optax.adam(0.1))
    good = [[[0.25, 0.5], [0.5, -0.75]], [[0.125, -0.5], [1.0, 0.25]]]
    for rows in (good[0], [[0.25, 0.5], [8.0, 0.25]], good[1]):
        trainer.run(rows)
    tx = optax.adam(0.1)
    params = jnp.asarray(W0)
    state = tx.init(params)
    for rows in good:
        updates, state = tx.update(jnp.asarray(rows[0]) + jnp.asarray(rows[1]), state, params)
        params = optax.apply_updates(params, updates)
    for component in trainer.w.values:
        np.testing.assert_allclose(np.asarray(component), params, rtol=1e-6)
    slots = {"/".join(path): np.asarray(slot.numpy()) for _, path, slot in trainer.opt.slot_variables()}
    np.testing.assert_allclose(slots["0/mu"], state[0].mu, rtol=1e-6)
    np.testing.assert_allclose(slots["0/nu"], state[0].nu, rtol=1e-6)
    assert int(slots["0/count"]) == int(state[0].count) == 2
    assert trainer.state()["iterations"] == 3  # tf_keras counts a skipped step (iterations 2 after one)
    assert float(trainer.opt.loss_scale) == 2.0 ** 14


def test_checkpoint_keeps_the_scale_and_its_counter(tmp_path):
    # Intent: the scale and the good-step counter are checkpointed variables (TF's names
    # loss_scale/current_loss_scale and good_steps), restored on another replica count; the
    # restored optimizer doubles 2000 good steps after the halving, as TF's rule says.
    trainer = Trainer(mirrored(2))
    trainer.run([[8.0, 0.5], [0.5, 0.25]])  # skipped: 2**14
    trainer.run(NORMAL, 3)
    path = sx.Checkpoint(w=trainer.w, optimizer=trainer.opt).save(str(tmp_path))
    stored = jax.tree_util.tree_map(np.asarray, ocp.StandardCheckpointer().restore(path))
    assert stored["optimizer"]["loss_scale"]["current_loss_scale"] == 2.0 ** 14
    assert stored["optimizer"]["loss_scale"]["good_steps"] == 3
    assert stored["optimizer"]["iterations"] == 4

    restored = Trainer(mirrored(4), w=[0.0, 0.0])
    assert float(restored.opt.loss_scale) == 2.0 ** 15
    sx.Checkpoint(w=restored.w, optimizer=restored.opt).restore(path).assert_consumed()
    assert restored.state()["loss_scale"] == 2.0 ** 14 and restored.state()["good_steps"] == 3
    np.testing.assert_array_equal(restored.state()["w"][3], trainer.state()["w"][0])
    restored.run(NORMAL)  # one step first: the conftest round trip re-runs the first call
    restored.run(NORMAL, 1995)
    assert (restored.state()["loss_scale"], restored.state()["good_steps"]) == (2.0 ** 14, 1999)
    restored.run(NORMAL)
    assert (restored.state()["loss_scale"], restored.state()["good_steps"]) == (2.0 ** 15, 0)
    assert restored.state()["iterations"] == 2001


def test_scaled_loss_and_unscaled_gradients_as_tensorflow():
    # Intent: tf_keras' formulas: loss * cast(scale, loss.dtype) (a callable stays a callable),
    # gradients * cast(1 / scale, g.dtype) with None kept; a pytree of gradients too.
    with mirrored(2).scope():
        opt = sx.Optimizer(optax.sgd(0.1), loss_scale="dynamic")
    scaled = opt.get_scaled_loss(jnp.float16(1.5))
    assert scaled.dtype == jnp.float16 and float(scaled) == 1.5 * 2 ** 15
    assert float(opt.get_scaled_loss(lambda: jnp.float32(0.5))()) == 2.0 ** 14
    g16, none, g32 = opt.get_unscaled_gradients((jnp.float16(2.0 ** 15), None, jnp.ones(2) * 2.0 ** 16))
    assert g16.dtype == jnp.float16 and float(g16) == 1.0 and none is None and g32.tolist() == [2.0, 2.0]
    tree = opt.get_unscaled_gradients({"a": jnp.float32(2.0 ** 14)})
    assert float(tree["a"]) == 0.5


def test_loss_scale_misuse_names_the_line():
    # Intent: a wrong loss_scale, or scaling without one, fails naming the user's line and the
    # fix (every bad argument: tests/test_public_arguments.py).
    with mirrored(2).scope():
        line = here() + 2
        with pytest.raises(ValueError) as err:
            sx.Optimizer(optax.sgd(0.1), loss_scale="static")
        assert_names_this_line(err, line)
        assert "dynamic" in str(err.value)
        opt = sx.Optimizer(optax.sgd(0.1))
    assert opt.loss_scale is None and not opt.dynamic and opt.dynamic_counter is None
    line = here() + 2
    with pytest.raises(ValueError) as err:
        opt.get_scaled_loss(jnp.float32(1.0))
    assert_names_this_line(err, line)
    assert 'loss_scale="dynamic"' in str(err.value)
