"""Record TensorFlow 2.21's loss helpers and metrics under MirroredStrategy (issue 19):
`tf.nn.compute_average_loss` (its divisor without global_batch_size on a partial batch, and
the error in cross-replica context), `tf.nn.scale_regularization_loss`, and Keras'
`Mean` / `SparseCategoricalAccuracy` updated inside `strategy.run` and read outside.
Writes tests/data/tf/losses_metrics.json via run_all.sh."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, local, main  # noqa: E402

DATA_DOC = ("per-example losses [1, 2, 3, 4, 5] as one global batch of 5 (replica 0 gets "
            "[1, 2, 3], replica 1 [4, 5]); regularization loss [0.5, 1.5]; labels [0, 1, 2, 1, 0] "
            "with logits rows one-hot at [0, 2, 2, 1, 1]")


def _dataset(tf, values):
    return tf.data.Dataset.from_tensor_slices(values).batch(5)


@scenario("losses")
def losses(tf, n):
    st = mirrored(tf, n)
    out = {"data": DATA_DOC}
    dist = st.experimental_distribute_dataset(_dataset(tf, tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])))
    x = next(iter(dist))
    out["average_no_gbs"] = local(st, st.run(lambda v: tf.nn.compute_average_loss(v), args=(x,)))
    out["average_gbs5"] = local(st, st.run(lambda v: tf.nn.compute_average_loss(v, global_batch_size=5), args=(x,)))
    out["average_weighted"] = local(st, st.run(
        lambda v: tf.nn.compute_average_loss(v, sample_weight=2.0 * tf.ones_like(v), global_batch_size=5), args=(x,)))
    one = next(iter(st.experimental_distribute_dataset(_dataset(tf, tf.constant([3.0])))))
    out["average_empty_replica"] = local(st, st.run(lambda v: tf.nn.compute_average_loss(v), args=(one,)))
    out["scale_regularization"] = local(st, st.run(
        lambda: tf.nn.scale_regularization_loss(tf.constant([0.5, 1.5]))))
    with st.scope():
        try:
            out["average_cross_replica"] = enc(tf.nn.compute_average_loss(tf.constant([1.0, 2.0])))
        except Exception as e:  # noqa: BLE001
            out["average_cross_replica"] = err(e)
        try:
            out["scale_cross_replica"] = enc(tf.nn.scale_regularization_loss(tf.constant([1.0, 2.0])))
        except Exception as e:  # noqa: BLE001
            out["scale_cross_replica"] = err(e)
    out["average_no_strategy"] = enc(tf.nn.compute_average_loss(tf.constant([1.0, 2.0, 3.0])))
    return out


@scenario("metrics")
def metrics(tf, n):
    st = mirrored(tf, n)
    labels = tf.constant([0, 1, 2, 1, 0])
    logits = tf.one_hot([0, 2, 2, 1, 1], 3)
    dist = st.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((labels, logits, tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))).batch(5))
    with st.scope():
        acc = tf.keras.metrics.SparseCategoricalAccuracy(name="acc")
        mean = tf.keras.metrics.Mean(name="loss")

    @tf.function
    def step(batch):
        def fn(y, p, v):
            acc.update_state(y, p)
            mean.update_state(v)
        st.run(fn, args=batch)

    out = {"data": DATA_DOC}
    step(next(iter(dist)))
    out["acc_result"] = enc(acc.result())
    out["mean_result"] = enc(mean.result())
    out["acc_variables"] = {v.name: enc(v.value) for v in acc.variables}
    out["mean_variables"] = {v.name: enc(v.value) for v in mean.variables}
    out["acc_variable_types"] = [type(v).__name__ for v in acc.variables]
    out["acc_synchronization"] = [str(getattr(v, "synchronization", None)) for v in acc.variables]
    out["acc_aggregation"] = [str(getattr(v, "aggregation", None)) for v in acc.variables]
    step(next(iter(dist)))
    out["acc_after_two"] = enc(acc.result())
    out["mean_after_two"] = enc(mean.result())
    acc.reset_state()
    mean.reset_state()
    out["acc_after_reset"] = enc(acc.result())
    out["mean_after_reset"] = enc(mean.result())
    mean.update_state(tf.constant([2.0, 4.0]), sample_weight=tf.constant([1.0, 3.0]))
    out["mean_weighted"] = enc(mean.result())
    return out


if __name__ == "__main__":
    sys.exit(main())
