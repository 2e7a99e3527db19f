"""Record tf.function's retracing behaviour (issue 15): which calls with changing Python floats
trace again, the "N out of the last M calls ... triggered tf.function retracing" warnings and
the calls they come at, what `reduce_retracing=True` changes for Python floats, and whether a
Python 0.0 and -0.0 share a trace. Each step runs `strategy.run(lambda x: x * lr, ...)` on a
PerReplica value whose replica i holds [i + 1, i + 2]. Writes tests/data/tf/retracing.json via
run_all.sh.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, main  # noqa: E402

RATES = [0.1 * (k + 1) for k in range(8)]


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _capture(tf):
    handler = _Warnings()
    tf.get_logger().addHandler(handler)
    return handler


def _values(tf, st):
    return st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([ctx.replica_id_in_sync_group + 1.0, ctx.replica_id_in_sync_group + 2.0]))


def _schedule(tf, n, reduce_retracing):
    st = mirrored(tf, n)
    x = _values(tf, st)
    traces, calls = [], []
    handler = _capture(tf)

    @tf.function(reduce_retracing=reduce_retracing)
    def step(x, lr):
        traces.append(len(calls))
        return st.run(lambda v: v * lr, args=(x,))

    for lr in RATES:
        before = len(handler.messages)
        out = step(x, lr)
        calls.append({"lr": lr, "out": enc(out),
                      "warnings": [m.split(". Tracing")[0] for m in handler.messages[before:]]})
    return {"rates": RATES, "traced_at_calls": traces, "calls": calls,
            "warning_text": handler.messages[0] if handler.messages else None}


@scenario("float_schedule", devices=(2,))
def float_schedule(tf, n):
    """@tf.function step(x, lr) = strategy.run(lambda v: v * lr, args=(x,)) called with the
    Python floats lr = 0.1, 0.2, ..., 0.8 (one call each). `traced_at_calls` lists the calls
    (0-based) that traced; each call's `warnings` are the retracing warnings it logged (up to
    ". Tracing"); `warning_text` is the first warning in full."""
    return _schedule(tf, n, reduce_retracing=False)


@scenario("float_schedule_reduce_retracing", devices=(2,))
def float_schedule_reduce_retracing(tf, n):
    """The same with @tf.function(reduce_retracing=True): TensorFlow still traces once per
    Python float (reduce_retracing relaxes tensor shapes, not Python values)."""
    return _schedule(tf, n, reduce_retracing=True)


@scenario("signed_zero", devices=(2,))
def signed_zero(tf, n):
    """@tf.function f(x, s) = strategy.run(lambda v: 1.0 / (v * 0.0 + s), args=(x,)) called
    with s = 0.0 then s = -0.0: whether the second call traces, and both results."""
    st = mirrored(tf, n)
    x = _values(tf, st)
    traces = []

    @tf.function
    def f(x, s):
        traces.append(s)
        return st.run(lambda v: 1.0 / (v * 0.0 + s), args=(x,))

    first, second = f(x, 0.0), f(x, -0.0)
    return {"traces": len(traces), "zero": enc(first), "negative_zero": enc(second)}


if __name__ == "__main__":
    sys.exit(main())
