"""Record TensorFlow 2.21's gradient through a cross-replica reduction: inside `strategy.run`, a
GradientTape over `ReplicaContext.all_reduce(op, x_r * w)` (x_r = r + 1 on replica r, w = 2.0),
SUM and MEAN, eagerly and in a tf.function. The gradient of an all-reduce is the same
all-reduce of the cotangents (SUM: every replica's cotangent 1 summed, so replica r's gradient
is N * x_r), which is also JAX's rule for strategax's collectives.
Writes tests/data/tf/gradients.json via run_all.sh; each scenario runs in its own process.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, main  # noqa: E402


def _register(op, mode):
    def run(tf, n):
        st = mirrored(tf, n)
        with st.scope():
            w = tf.Variable(2.0)

        def step(x):
            with tf.GradientTape() as tape:
                y = tf.distribute.get_replica_context().all_reduce(op, x * w)
            return tape.gradient(y, w)
        fn = tf.function(step) if mode == "tf_function" else step
        x = st.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
        return enc(st.run(fn, args=(x,)))
    run.__doc__ = "d/dw of all_reduce(%s, x_r * w) on replica r (x_r = r + 1, w = 2.0), %s." % (op, mode)
    scenario("all_reduce_%s_%s" % (op.lower(), mode), devices=(2, 3))(run)


for _op in ("SUM", "MEAN"):
    for _mode in ("eager", "tf_function"):
        _register(_op, _mode)


if __name__ == "__main__":
    sys.exit(main())
