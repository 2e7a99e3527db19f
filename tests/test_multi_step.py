"""Many steps in one program: `next(iterator)` inside a strategy.function is a program input,
and `for _ in sx.range(n)` is one on-device loop. Checked against the same steps one per
call and against TensorFlow's recorded numbers (tests/data/tf/multi_step.json, recorded by
tools/tf_record/record_multi_step.py)."""
import json
import re
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_names_this_line, here

import strategax as sx

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/multi_step.json").read_text())["scenarios"]
GLOBAL_BATCH, LR = 8, 0.1


def st2():
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])


def batches(n_examples: int = 102):
    """The recorded data: x[i] = [sin i, cos i, i/100], y linear in x, global batches of 8."""
    i = np.arange(n_examples, dtype=np.float32)
    x = np.stack([np.sin(i), np.cos(i), i / 100], axis=1).astype(np.float32)
    y = (2 * x[:, 0] - x[:, 1] + 0.5 * x[:, 2] + 0.1).astype(np.float32)
    return [(x[k:k + GLOBAL_BATCH], y[k:k + GLOBAL_BATCH]) for k in range(0, n_examples, GLOBAL_BATCH)]


def linear_model(st):
    """The recorded model: w, b trained by SGD on an all-reduced (SUM) gradient."""
    with st.scope():
        w, b = sx.Variable(jnp.zeros(3)), sx.Variable(0.0)

    def step(inputs):
        x, y = inputs

        def loss_fn(w_, b_):
            return sx.nn.compute_average_loss((x @ w_ + b_ - y) ** 2, global_batch_size=GLOBAL_BATCH)
        loss, grads = jax.value_and_grad(loss_fn, argnums=(0, 1))(w.read_value(), b.read_value())
        gw, gb = sx.get_replica_context().all_reduce("SUM", grads)
        w.assign_sub(LR * gw)
        b.assign_sub(LR * gb)
        return loss

    return w, b, step


def value(rec):
    return np.asarray(rec["value"], np.float32)


def test_loop_of_steps_ends_with_the_weights_of_one_step_calls_even_when_the_data_runs_out():
    # Intent: 20 steps in one program (one on-device loop, one copy of the step) give the
    # weights of 20 one-step calls; on an iterator that runs out 13 steps into the second
    # call, that call runs those 13 and the next raises OutOfRangeError, taking nothing.
    st = st2()
    data = batches(8 * 32 + 6)  # 33 batches, the last one partial
    w, b, step = linear_model(st)

    @st.function
    def train_steps(iterator):
        for _ in sx.range(20):
            loss = st.run(step, args=(next(iterator),))
        return st.reduce("SUM", loss)

    iterator = iter(st.experimental_distribute_dataset(data))
    train_steps(iterator)
    text = train_steps.ir(iterator)
    loop_loss = train_steps(iterator)  # 13 steps: the iterator runs out

    with pytest.raises(sx.OutOfRangeError) as err:
        line = here(); train_steps(iterator)  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert len(train_steps._cache) == 1 and text.count("jax.while") == 1
    w_loop, b_loop = w.numpy(), b.numpy()

    w2, b2, step2 = linear_model(st)
    one_step = st.function(lambda inputs: st.reduce("SUM", st.run(step2, args=(inputs,))))
    for inputs in st.experimental_distribute_dataset(data):
        last_loss = one_step(inputs)
    np.testing.assert_allclose(w_loop, w2.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b_loop, b2.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(loop_loss, last_loss, rtol=1e-6)
    # one copy of the step: the loop's program holds the step's two matrix products once
    assert text.count("jax.dot_general") == one_step.ir(inputs).count("jax.dot_general") == 2


def test_tf_range_loop_matches_tensorflow():
    # Intent: TensorFlow's tutorial idiom gives TF's losses and weights call by call; when the
    # data runs out the real steps' updates stay (TF then raises in that call, strategax in the
    # next one: the loop ends after the last real batch).
    rec = RECORDED["range_loop_r2"]["result"]["calls"]
    st = st2()
    w, b, step = linear_model(st)

    @st.function
    def train(iterator):
        for _ in sx.range(5):
            loss = st.reduce("SUM", st.run(step, args=(next(iterator),)), axis=None)
        return loss

    iterator = iter(st.experimental_distribute_dataset(batches()))
    for k, call in enumerate(rec):
        if k < 3:
            loss = train(iterator)
            if "value" in call["loss"]:
                np.testing.assert_allclose(loss, value(call["loss"]), rtol=1e-5)
            else:
                assert call["loss"]["error"] == "OutOfRangeError"  # TF: after the 3 real steps
        else:
            assert call["loss"]["error"] == "OutOfRangeError"
            with pytest.raises(sx.OutOfRangeError):
                train(iterator)
        np.testing.assert_allclose(w.numpy(), value(call["w"]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.numpy(), value(call["b"]), rtol=1e-5, atol=1e-6)


def test_run_steps_on_iterator_matches_tensorflow():
    # Intent: the seed's experimental_run_steps_on_iterator: last-step outputs (reduced, and
    # per replica), non-tensor outputs and weights as TF records them, on the same machinery.
    rec = RECORDED["run_steps_on_iterator_r2"]["result"]["calls"]
    st = st2()
    w, b, step = linear_model(st)

    def fn(ctx, inputs):
        loss = st.run(step, args=(inputs,))
        ctx.set_last_step_output("loss", loss, reduce_op=sx.ReduceOp.SUM)
        ctx.set_last_step_output("per_replica", loss)
        ctx.set_non_tensor_output("model", "linear")

    iterator = iter(st.experimental_distribute_dataset(batches()))
    for iterations, call in zip((4, 4, 8), rec):
        ctx = st.extended.experimental_run_steps_on_iterator(fn, iterator, iterations=iterations)
        if "error" not in call:  # TF's third call runs 5 steps and raises; ours runs them
            np.testing.assert_allclose(ctx.last_step_outputs["loss"], value(call["loss"]), rtol=1e-5)
            got = st.experimental_local_results(ctx.last_step_outputs["per_replica"])
            np.testing.assert_allclose(got, [value(r) for r in call["per_replica"]], rtol=1e-5)
            assert ctx.non_tensor_outputs == call["non_tensor_outputs"]
        np.testing.assert_allclose(w.numpy(), value(call["w"]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.numpy(), value(call["b"]), rtol=1e-5, atol=1e-6)


def test_next_outside_a_loop_is_an_input_and_a_failed_call_takes_nothing():
    # Intent: each next(iterator) takes one batch; a new iterator (next epoch) reuses the
    # program; a call that finds no batch for its second next() puts the first one back.
    st = st2()
    data = [np.full((4, 2), k, np.float32) for k in range(5)]
    traces = []

    @st.function
    def pair_sum(iterator):
        traces.append(1)
        a, b = next(iterator), next(iterator)
        return st.reduce("SUM", st.run(lambda x, y: jnp.sum(x) + 10 * jnp.sum(y), args=(a, b)))

    for _ in range(2):  # two epochs
        iterator = iter(st.experimental_distribute_dataset(data))
        assert float(pair_sum(iterator)) == 8 * 0 + 80 * 1
        assert float(pair_sum(iterator)) == 8 * 2 + 80 * 3
        with pytest.raises(sx.OutOfRangeError) as err:
            line = here(); pair_sum(iterator)  # noqa: E702  here() names the line of the call
        assert_names_this_line(err, line)
        assert float(np.sum(st.experimental_local_results(next(iterator)))) == 8 * 4  # put back
    assert len(traces) == 1


def test_sx_range_carries_values_rebound_in_the_body():
    # Intent: `y = f(y)`, `total = total + ...`, a value kept for the next step only and the
    # index are loop-carried, with a static and a traced trip count: what Python's loop gives.
    st = st2()
    with st.scope():
        seen = sx.Variable(0.0)

    def body(x, n):
        y, total, previous, i = x, jnp.float32(0), jnp.float32(0), -1
        for i in sx.range(n):
            seen.assign_add(previous)  # the step before's value, used by no later step
            previous = jnp.sum(y)
            y = y * 0.5 + i
            total = total + jnp.sum(y)
        return y, total, i

    compiled = st.function(body)
    x = jnp.arange(3.0)
    for n in (5, jnp.int32(4)):  # a static and a traced trip count
        y, total, previous, seen_before, i = np.asarray(x), 0.0, 0.0, float(seen.numpy()), -1
        for i in range(int(n)):
            seen_before, previous = seen_before + previous, np.sum(y)
            y = y * 0.5 + i
            total = total + np.sum(y)
        got = compiled(x, n)
        np.testing.assert_allclose(got[0], y, rtol=1e-6)
        np.testing.assert_allclose(got[1], total, rtol=1e-6)
        np.testing.assert_allclose(seen.numpy(), seen_before, rtol=1e-6)
        assert int(got[2]) == i


def test_values_kept_from_earlier_steps_raise():
    # Intent: a Python list of per-step values would hold two traced steps, not n: it raises
    # at the line that uses it after the loop.
    st = st2()
    line = here() + 6
    @st.function
    def f(x):
        losses = []
        for _ in sx.range(3):
            losses.append(jnp.sum(x))
        return jnp.stack(losses)
    with pytest.raises(ValueError) as err:
        f(jnp.ones(2))
    assert_names_this_line(err, line)
    assert "earlier step" in str(err.value)


def test_python_state_changing_per_step_raises():
    # Intent: a Python number changed in the body would be frozen at its traced values.
    st = st2()
    line = here() + 6
    @st.function
    def f(x):
        scale = 1.0
        for _ in sx.range(3):
            scale = scale * 2.0
            x = x * scale
        return x
    with pytest.raises(ValueError) as err:
        f(jnp.ones(2))
    assert_names_this_line(err, line)
    assert "traces differently" in str(err.value) or "reads different values" in str(err.value)


def test_break_inside_sx_range_raises():
    # Intent: the body is one step of an on-device loop: `break` cannot end it (the error
    # names the loop's line).
    st = st2()
    line = here() + 3
    @st.function
    def f(x):
        for _ in sx.range(3):
            x = x + 1.0
            break
        return x
    with pytest.raises(TypeError) as err:
        f(jnp.ones(2))
    assert_names_this_line(err, line)


def test_iterator_misuse_inside_a_function_raises():
    # Intent: an iterator captured by closure, iterated whole into a Python list (every step's
    # value kept: a loop keeps only the last step's), or read in a loop whose trip count is
    # traced cannot be a fixed set of program inputs: each raises with the fix.
    st = st2()
    iterator = iter(st.experimental_distribute_dataset([np.ones((4, 2), np.float32)] * 3))
    line = here() + 2
    def captured():
        return next(iterator)
    with pytest.raises(TypeError) as err:
        st.function(captured)()
    assert_names_this_line(err, line)
    line = here() + 2
    def whole(it):
        return [x for x in it]
    with pytest.raises(sx.DistributionValueError, match="kept in a Python list") as err:
        st.function(whole)(iterator)
    assert_names_this_line(err, line)
    line = here() + 2
    def traced_steps(it, n):
        for _ in sx.range(n):
            st.run(jnp.sum, args=(next(it),))
    with pytest.raises(TypeError) as err:
        st.function(traced_steps)(iterator, jnp.int32(2))
    assert_names_this_line(err, line)
    assert "Python int" in str(err.value)


def test_loop_program_holds_its_counts_as_constants_for_full_calls_and_reads_them_otherwise():
    # Intent: a call whose loop gets every step's batch, each full, runs a program that holds
    # the steps count and the row counts as constants (XLA knows the loop's trip count: no
    # read-back of its condition on a GPU; the row masks fold away); a call with a padded batch
    # whose iterator runs out mid-loop runs the program that reads them. Every call's weights
    # are plain JAX's SGD on the same global batches.
    st = st2()
    data = batches(8 * 9 + 3)  # 10 batches: 8 full, then 3 rows (the last call: 2 steps, one partial)
    w, b, step = linear_model(st)

    @st.function
    def train_steps(iterator):
        for _ in sx.range(4):
            loss = st.run(step, args=(next(iterator),))
        return st.reduce("SUM", loss)

    def reference_step(params, x, y):
        grads = jax.grad(lambda p: jnp.sum((x @ p[0] + p[1] - y) ** 2) / GLOBAL_BATCH)(params)
        return params[0] - LR * grads[0], params[1] - LR * grads[1]

    iterator = iter(st.experimental_distribute_dataset(data))
    params = (jnp.zeros(3), jnp.float32(0.0))
    for first, last in ((0, 4), (4, 8), (8, 10)):
        train_steps(iterator)
        for x, y in data[first:last]:
            params = reference_step(params, jnp.asarray(x), jnp.asarray(y))
        np.testing.assert_allclose(w.numpy(), params[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.numpy(), params[1], rtol=1e-5, atol=1e-6)
        if first == 0:  # the program of full calls: no row mask of sx's, the loop bounded by a constant
            text = train_steps.stablehlo(iterator)  # (the iotas left: compute_average_loss's own mask)
            assert text.count("stablehlo.iota") == train_steps.ir(iterator).count("jax.iota") == 1
            assert re.search(r"cond \{\s*(%\S+ = stablehlo.constant [^\n]*\s*)*%\S+ = stablehlo.compare\s+LT, "
                             r"%iterArg\w*, %c\w*", text)
    assert len(train_steps._cache) == 1
