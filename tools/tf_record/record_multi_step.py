"""Record many steps per call in TensorFlow (issue 18): the custom-training tutorial's
`for _ in tf.range(n): strategy.run(step, args=(next(iterator),))` inside a tf.function,
and the seed's `extended.experimental_run_steps_on_iterator`, including an iterator that
runs out in the middle of a call.

The model is a linear regression trained with plain SGD; the data (DATA_DOC) has 12 full
global batches of 8 and a last one of 6. Writes tests/data/tf/multi_step.json via
run_all.sh; each scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, local, main  # noqa: E402

GLOBAL_BATCH, LR = 8, 0.1
DATA_DOC = ("x[i] = [sin(i), cos(i), i / 100] for i in range(102) (float32), y = 2 x0 - x1 + "
            "0.5 x2 + 0.1; batch(8): 12 full batches and one of 6. Model: w = zeros(3), b = 0 "
            "(mirrored); per-example loss (x.w + b - y)^2, tf.nn.compute_average_loss(..., "
            "global_batch_size=8); gradients all-reduced (SUM) in the replica function, then "
            "w -= 0.1 g, b -= 0.1 g_b.")


def _data(tf):
    import numpy as np
    i = np.arange(102, dtype=np.float32)
    x = np.stack([np.sin(i), np.cos(i), i / 100], axis=1).astype(np.float32)
    y = (2 * x[:, 0] - x[:, 1] + 0.5 * x[:, 2] + 0.1).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


def _model(tf, n):
    st = mirrored(tf, n)
    with st.scope():
        w = tf.Variable(tf.zeros(3))
        b = tf.Variable(0.0)

    def step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            per_example = (tf.linalg.matvec(x, w) + b - y) ** 2
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        gw, gb = tape.gradient(loss, [w, b])
        gw, gb = tf.distribute.get_replica_context().all_reduce("SUM", [gw, gb])
        w.assign_sub(LR * gw)
        b.assign_sub(LR * gb)
        return loss

    return st, w, b, step


def _weights(w, b):
    return {"w": enc(w.numpy()), "b": enc(b.numpy())}


@scenario("range_loop", devices=(2,))
def range_loop(tf, n):
    """@tf.function train(iterator): `for _ in tf.range(5): loss = strategy.run(step,
    args=(next(iterator),))`, returning strategy.reduce(SUM, loss). Called 4 times on one
    iterator of the 13 batches: calls 1 and 2 run 5 steps each, call 3 runs the last 3
    batches and raises OutOfRangeError (the updates of those 3 steps stay), call 4 raises at
    once. `calls[k]` holds the returned loss (or the error) and the weights after call k.
    """
    st, w, b, step = _model(tf, n)

    @tf.function
    def train(iterator):
        loss = tf.constant(0.0)
        for _ in tf.range(5):
            loss = st.reduce("SUM", st.run(step, args=(next(iterator),)), axis=None)
        return loss

    iterator = iter(st.experimental_distribute_dataset(_data(tf)))
    calls = []
    for _ in range(4):
        try:
            rec = {"loss": enc(train(iterator))}
        except Exception as e:  # noqa: BLE001
            rec = {"loss": err(e)}
        rec.update(_weights(w, b))
        calls.append(rec)
    return {"data": DATA_DOC, "calls": calls}


@scenario("one_step_calls", devices=(2,))
def one_step_calls(tf, n):
    """The same training one step per call: @tf.function train_step(inputs) on
    next(iterator) for all 13 batches. `w`, `b`: the weights at the end."""
    st, w, b, step = _model(tf, n)

    @tf.function
    def train_step(inputs):
        return st.reduce("SUM", st.run(step, args=(inputs,)), axis=None)

    losses = [enc(train_step(inputs)) for inputs in st.experimental_distribute_dataset(_data(tf))]
    return {"data": DATA_DOC, "losses": losses, **_weights(w, b)}


@scenario("run_steps_on_iterator", devices=(2,))
def run_steps_on_iterator(tf, n):
    """strategy.extended.experimental_run_steps_on_iterator(fn, iterator, iterations) with
    fn(ctx, inputs) running the step, ctx.set_last_step_output("loss", loss, reduce_op=SUM),
    ctx.set_last_step_output("per_replica", loss) and ctx.set_non_tensor_output("model",
    "linear"); initial_loop_values={"loss": 0.0, "per_replica": (0.0, 0.0)} (TF 2.21 needs
    the structure). Called with iterations 4, 4 and 8 on one iterator of the 13 batches (the
    third runs out after 5 steps). `calls[k]`: last_step_outputs (local results),
    non_tensor_outputs, weights, or the error."""
    st, w, b, step = _model(tf, n)

    def fn(ctx, inputs):
        loss = st.run(step, args=(inputs,))
        ctx.set_last_step_output("loss", loss, reduce_op=tf.distribute.ReduceOp.SUM)
        ctx.set_last_step_output("per_replica", loss)
        ctx.set_non_tensor_output("model", "linear")

    iterator = iter(st.experimental_distribute_dataset(_data(tf)))
    calls = []
    for iterations in (4, 4, 8):
        try:
            ctx = st.extended.experimental_run_steps_on_iterator(
                fn, iterator, iterations=iterations,
                initial_loop_values={"loss": 0.0, "per_replica": (0.0, 0.0)})
            rec = {"loss": enc(ctx.last_step_outputs["loss"]),
                   "per_replica": local(st, ctx.last_step_outputs["per_replica"]),
                   "non_tensor_outputs": enc(ctx.non_tensor_outputs)}
        except Exception as e:  # noqa: BLE001
            rec = {"error": err(e)}
        rec.update(_weights(w, b))
        calls.append(rec)
    return {"data": DATA_DOC, "calls": calls}


if __name__ == "__main__":
    sys.exit(main())
