"""Record TensorFlow 2.21's dynamic loss scaling for float16 under MirroredStrategy (issue 24):
a step whose gradient overflows in float16 on replica 0 or on replica 1 only, the halving and
the doubling after 2,000 good steps, and the floor of the halving.

Two LossScaleOptimizers ship with TensorFlow 2.21, and both are recorded:
* `tf_keras` (Keras 2, `tf_keras` 2.21, what `tf.keras` is under TF_USE_LEGACY_KERAS=1): the
  API strategax follows (`get_scaled_loss`, `get_unscaled_gradients`, `apply_gradients` of
  unscaled gradients, `loss_scale`, `dynamic_counter`). It all-reduces the gradients before it
  checks them, so an overflow on any replica skips the step on all.
* `keras3` (`tf.keras`, Keras 3.x, TF 2.21's default): `scale_loss`, and `apply_gradients` of
  scaled gradients (it divides by the scale itself). Under MirroredStrategy it checks replica
  0's own (not yet all-reduced) gradients only: when only replica 1 overflows it applies the
  step, and the weights become inf/NaN.

Install tf_keras beside TensorFlow without its dependencies (it would pull `tensorflow` over
`tensorflow-cpu`): `/work/tfvenv/bin/pip install --no-deps tf-keras==2.21.*`.
Writes tests/data/tf/loss_scale.json via run_all.sh; each scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, main  # noqa: E402

LR = 0.125
W0 = [1.0, 2.0]
NORMAL = [[0.25, 0.5], [0.5, 0.25]]          # x per replica: scaled gradients stay finite
OVERFLOW_R0 = [[8.0, 0.5], [0.5, 0.25]]      # 8 * 2**15 > 65504: inf in float16 on replica 0
OVERFLOW_R1 = [[0.25, 0.5], [0.5, 8.0]]      # ... on replica 1 only
NAN_BOTH = [[float("nan"), 0.5], [0.5, 0.25]]
STEPS_DOC = ("w = tf.Variable([1.0, 2.0]) (float32, mirrored, 2 replicas); replica r gets x_r "
             "(float16, shape [2]); per-replica loss = reduce_sum(cast(w, float16) * x_r) in "
             "float16; the gradient is taken of the scaled loss through the cast, and SGD(0.125) "
             "applies the all-reduced (SUM) unscaled gradient. Overflow data has an 8.0 on one "
             "replica: 8 * 2**15, 8 * 2**14 and 8 * 2**13 overflow float16, 8 * 2**12 does not.")


def _keras(tf, api):
    if api == "tf_keras":
        import tf_keras
        return tf_keras
    return tf.keras


def _setup(tf, n, api, **kwargs):
    """The variable, the optimizer, and run(rows, n_steps): n steps in one tf.function call."""
    keras = _keras(tf, api)
    st = mirrored(tf, n)
    with st.scope():
        w = tf.Variable(W0, name="w")
        opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(LR), **kwargs)
        opt.build([w])  # its variables, before the first tf.function traces

    def replica_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(w, tf.float16) * x)
            scaled = opt.get_scaled_loss(loss) if api == "tf_keras" else opt.scale_loss(loss)
        grads = tape.gradient(scaled, [w])
        if api == "tf_keras":
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, [w]))  # keras3 takes the scaled gradients and unscales
        return loss

    @tf.function
    def steps(x, n_steps):
        for _ in tf.range(n_steps):
            st.run(replica_step, args=(x,))

    def run(per_replica_x, n_steps=1):
        x = st.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(per_replica_x[ctx.replica_id_in_sync_group], tf.float16))
        steps(x, tf.constant(n_steps))

    return w, opt, run


def _state(tf, api, w, opt):
    if api == "tf_keras":
        scale, counter = opt.loss_scale, opt.dynamic_counter
    else:
        scale, counter = opt.dynamic_scale, opt.step_counter
    return {"w": enc(w), "loss_scale": float(tf.convert_to_tensor(scale).numpy()),
            "good_steps": None if counter is None else int(tf.convert_to_tensor(counter).numpy()),
            "iterations": int(opt.iterations.numpy())}


def _overflow(tf, n, api, bad, steps=6, **kwargs):
    w, opt, run = _setup(tf, n, api, **kwargs)
    data = [NORMAL, bad, bad, bad, bad, NORMAL][:steps]
    states = []
    for x in data:
        run(x)
        states.append(_state(tf, api, w, opt))
    return {"setup": STEPS_DOC, "api": api, "data": data, "after_each_step": states}


def _register_overflow(api, bad, which):
    def record(tf, n):
        return _overflow(tf, n, api, bad)
    record.__doc__ = (f"{api}: one normal step, four steps whose float16 gradient overflows on "
                      f"{which} only (the scaled gradient 8 * scale is inf for scales 2**15, 2**14 "
                      "and 2**13, finite for 2**12), one normal step; the state after each step.")
    scenario(f"{api}_overflow_{which.replace(' ', '')}")(record)


for _api in ("tf_keras", "keras3"):
    _register_overflow(_api, OVERFLOW_R0, "replica 0")
    _register_overflow(_api, OVERFLOW_R1, "replica 1")


@scenario("tf_keras_fixed_overflow_replica1")
def fixed(tf, n):
    """tf_keras with a fixed scale (dynamic=False, initial_scale=2**15): the first two steps of
    tf_keras_overflow_replica1; the overflowing one is applied as it is (a fixed scale never
    skips). Later steps are not recorded: tf_keras' SGD then turns the -inf weight into NaN
    (its momentum buffer, 0 * inf, though momentum=0), which is SGD's, not loss scaling's."""
    return _overflow(tf, n, "tf_keras", OVERFLOW_R1, steps=2, dynamic=False, initial_scale=2.0 ** 15)


def _growth(tf, n, api):
    w, opt, run = _setup(tf, n, api)
    out, done = {}, 0
    for total, x in ((1, OVERFLOW_R0), (1999, NORMAL), (2000, NORMAL), (2001, NORMAL),
                     (4000, NORMAL), (4001, NORMAL)):
        run(x, total - done)
        done = total
        state = _state(tf, api, w, opt)
        del state["w"]
        out[str(total)] = state
    return {"setup": STEPS_DOC, "api": api, "steps": ("step 1 overflows on replica 0; steps 2.. "
                                                      "are normal"),
            "state_after_step": out}


def _floor(tf, n, api):
    w, opt, run = _setup(tf, n, api, initial_scale=4.0)
    states = []
    for _ in range(4):
        run(NAN_BOTH)
        states.append(_state(tf, api, w, opt))
    return {"setup": STEPS_DOC, "api": api, "initial_scale": 4.0,
            "data": "x has a NaN on replica 0 in every step", "after_each_step": states}


def _register_growth_and_floor(api):
    def growth(tf, n):
        return _growth(tf, n, api)

    def floor(tf, n):
        return _floor(tf, n, api)
    growth.__doc__ = (f"{api}: the loss scale, good-step counter and iterations after steps 1, "
                      "1999, 2000, 2001, 4000 and 4001 (step 1 overflows, the rest are normal), "
                      "run as tf.range loops inside one tf.function.")
    floor.__doc__ = (f"{api}: initial_scale=4, four steps with a NaN gradient: the halving's floor.")
    scenario(f"{api}_growth")(growth)
    scenario(f"{api}_floor")(floor)


for _api in ("tf_keras", "keras3"):
    _register_growth_and_floor(_api)

if __name__ == "__main__":
    sys.exit(main())
