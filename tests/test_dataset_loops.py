"""`for x in dist_dataset` and `for x in iterator` inside a strategy.function: one on-device loop
over every batch left (TensorFlow's "iterating inside a tf.function"), checked against
TensorFlow 2.21's recorded numbers (tests/data/tf/gaps.json, tools/tf_record/record_gaps.py)
and against the same steps one per call."""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import assert_names_this_line, here

import strategax as sx

RECORDED = json.loads((pathlib.Path(__file__).parent / "data/tf/gaps.json").read_text())["scenarios"]
LOOPS = RECORDED["dataset_loops_r3"]["result"]


def numbers():
    """The recorded data: 0..10 as float32 in global batches of 4, 4 and 3."""
    x = np.arange(11, dtype=np.float32)
    return [x[i:i + 4] for i in range(0, 11, 4)]


def R(op, x):
    """reduce over the replicas and the batch, by the strategy that compiles the function."""
    return sx.get_strategy().reduce(op, x, axis=0)


def values(rec):
    return [np.float32(r["value"]) for r in rec] if isinstance(rec, list) else np.float32(rec["value"])


def tutorial(st, in_function: bool):
    """The custom-training tutorial's epoch (docs/porting.md section 4): a line fitted by SGD."""
    x = np.arange(10, dtype=np.float32) / 10
    data = [(x[i:i + 4], 3 * x[i:i + 4] + 1) for i in range(0, 10, 4)]
    with st.scope():
        w, b = sx.Variable(0.0), sx.Variable(0.0)
        opt = sx.Optimizer(optax.sgd(0.5))

    def replica_fn(inputs):
        xs, ys = inputs

        def loss_fn(w_, b_):
            per_example = (w_ * xs + b_ - ys) ** 2
            return sx.nn.compute_average_loss(per_example, global_batch_size=4), per_example
        (_, per_example), grads = jax.value_and_grad(loss_fn, (0, 1), has_aux=True)(w.read_value(), b.read_value())
        opt.apply_gradients(zip(grads, [w, b]))
        return per_example

    @st.function
    def train_epoch(dataset):  # as the tutorial writes it
        total = 0.
        for x in dataset:
            total += st.reduce("SUM", st.run(replica_fn, args=(x,)), axis=0)
        return total

    @st.function
    def train_step(x):
        return st.reduce("SUM", st.run(replica_fn, args=(x,)), axis=0)

    dist = st.experimental_distribute_dataset(data)
    totals = []
    for _ in range(3):
        totals.append(float(train_epoch(dist)) if in_function else sum(float(train_step(x)) for x in dist))
    return totals, w, b, train_epoch, dist


def test_tutorial_train_epoch_runs_as_written_and_matches_the_python_loop():
    # Intent: the tutorial's train_epoch (the loop inside the function, its last batch partial)
    # gives TensorFlow's totals and weights, the same as the loop in Python over one-step calls;
    # the epoch is one on-device loop (one while, one program for every epoch).
    rec = RECORDED["train_epoch_r2"]["result"]
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    totals, w, b, train_epoch, dist = tutorial(st, in_function=True)
    loop_totals, w2, b2, _, _ = tutorial(st, in_function=False)
    np.testing.assert_allclose(totals, rec["in_function"]["totals"], rtol=1e-6)
    np.testing.assert_allclose(loop_totals, rec["python_loop"]["totals"], rtol=1e-6)
    np.testing.assert_allclose(totals, loop_totals, rtol=1e-6)
    for got, got_loop, want in ((w, w2, rec["in_function"]["w"]), (b, b2, rec["in_function"]["b"])):
        np.testing.assert_allclose(got.numpy(), want["values"][0]["value"], rtol=1e-6)
        np.testing.assert_allclose(got.numpy(), got_loop.numpy(), rtol=1e-6)
    assert len(train_epoch._cache) == 1 and train_epoch.ir(dist).count("jax.while") == 1


def test_loops_over_the_data_match_tensorflow():
    # Intent: sums over the data with the partial last batch (2/2/0, 2/2/0, 1/1/1 rows on 3
    # replicas), two loops in one function with loop-carried arrays, next(iterator) then a loop
    # over the rest, a distribute_datasets_from_function dataset and an empty one give
    # TensorFlow's numbers.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    dist = st.experimental_distribute_dataset(numbers())

    def sums_fn(ds):
        total, last = 0., jnp.zeros(())
        for x in ds:
            total += R("SUM", x)
            last = R("MEAN", x)
        return total, last
    sums = st.function(sums_fn)

    @st.function
    def two_loops(ds):
        a = jnp.zeros(())
        for x in ds:
            a = a + R("SUM", x)
        b = a
        for x in ds:
            b = b * 0.5 + R("MEAN", x)
        return a, b

    @st.function
    def on_iterator(it):
        first = R("SUM", next(it))
        rest = jnp.zeros(())
        for x in it:
            rest = rest + R("SUM", x)
        return first, rest

    from_function = st.distribute_datasets_from_function(lambda ctx: [np.full(2, i, np.float32) for i in range(7)])
    np.testing.assert_allclose(sums(dist), values(LOOPS["sums"]))
    np.testing.assert_allclose(two_loops(dist), values(LOOPS["two_loops"]))
    np.testing.assert_allclose(on_iterator(iter(dist)), values(LOOPS["iterator"]))
    it = iter(dist)
    next(it)
    np.testing.assert_allclose(on_iterator(it), values(LOOPS["iterator_one_batch_in"]))
    with pytest.raises(sx.OutOfRangeError):  # nothing left: the next() finds no batch
        on_iterator(it)
    np.testing.assert_allclose(sums(from_function), values(LOOPS["from_function_sums"]))
    np.testing.assert_allclose(sums(st.experimental_distribute_dataset([])), values(LOOPS["empty_sums"]))
    one = sx.MirroredStrategy(["CPU:0"])  # one replica: plain values, the partial batch masked
    np.testing.assert_allclose(one.function(sums_fn)(one.experimental_distribute_dataset(numbers())),
                               values(LOOPS["sums"]))


def test_one_program_per_count_of_batches():
    # Intent: the number of batches is part of the program's key: a dataset with as many batches
    # (a new dataset object, or a new iterator each epoch) reuses the program, another count
    # compiles one of its own, and each gives the sum of its own data.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    total = st.function(lambda ds: sum_loop(st, ds))
    x = np.arange(24, dtype=np.float32)
    three = [x[i:i + 4] for i in range(0, 12, 4)]
    five = [x[i:i + 4] for i in range(0, 20, 4)]
    assert float(total(st.experimental_distribute_dataset(three))) == x[:12].sum()
    assert float(total(st.experimental_distribute_dataset(three))) == x[:12].sum()
    assert len(total._cache) == 1
    assert float(total(st.experimental_distribute_dataset(five))) == x[:20].sum()
    assert len(total._cache) == 2
    assert float(total(iter(st.experimental_distribute_dataset(five)))) == x[:20].sum()
    assert float(total(iter(st.experimental_distribute_dataset(five)))) == x[:20].sum()
    assert len(total._cache) == 3  # datasets of 3 and 5 batches, iterators of 5


def sum_loop(st, ds):
    s = jnp.zeros(())
    for x in ds:
        s = s + st.reduce("SUM", x, axis=0)
    return s


def test_break_leaves_the_loop_where_python_left_it():
    # Intent: a `break` Python takes in the loop's first step is one step (TensorFlow refuses any
    # break in a loop over a distributed dataset, recorded); on an iterator the batches after it
    # stay in the iterator.
    assert LOOPS["dataset_break"]["error"] == "NotImplementedError"
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    dist = st.experimental_distribute_dataset(numbers())

    @st.function
    def first_batch(ds):
        for x in ds:
            return st.reduce("SUM", x, axis=0)

    assert float(first_batch(dist)) == 6.0
    it = iter(dist)
    assert float(first_batch(it)) == 6.0
    assert float(st.reduce("SUM", next(it), axis=0)) == 22.0  # the second batch, as TensorFlow's
    assert float(values(LOOPS["iterator_after_break_next_sum"])) == 27.0  # (after two batches there)


def test_python_numbers_the_loop_changes_are_carried_as_autograph_carries_them():
    # Intent: the tutorial's `num_batches += 1` (a Python int changed by every step) counts the
    # batches, as AutoGraph's tensor does (recorded: 3), and a Python float schedule `lr *= 0.5`
    # decays over the steps; the first step runs on its own, the rest in one on-device loop.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    dist = st.experimental_distribute_dataset(numbers())

    @st.function
    def train_epoch(ds):  # the tutorial's "iterating inside a tf.function"
        total_loss = 0.0
        num_batches = 0
        for x in ds:
            total_loss += st.reduce("SUM", x, axis=0)
            num_batches += 1
        return total_loss / num_batches, num_batches

    @st.function
    def decayed(ds):
        lr, s = 1.0, jnp.zeros(())
        for x in ds:
            s = s + lr * st.reduce("SUM", x, axis=0)
            lr = lr * 0.5
        return s, lr

    mean, count = train_epoch(dist)
    assert int(count) == int(values(LOOPS["python_counter"])) == 3
    np.testing.assert_allclose(mean, float(values(LOOPS["sums"])[0]) / 3, rtol=1e-6)
    assert train_epoch.ir(dist).count("jax.while") == 1
    s, lr = decayed(dist)
    np.testing.assert_allclose([s, lr], [6 + 22 * 0.5 + 27 * 0.25, 0.125], rtol=1e-6)
    two = st.experimental_distribute_dataset(numbers()[:2])  # the first step and one more: no loop left
    np.testing.assert_allclose(train_epoch(two), [14.0, 2])


def test_python_branches_on_the_steps_values_raise():
    # Intent: a Python number that changes in a way the first step did not show (enumerate's
    # counter) raises naming it and the loop's line; a data-dependent `break` (TensorFlow
    # converts one on an iterator: 28, recorded) raises naming its line.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
    dist = st.experimental_distribute_dataset(numbers())

    def enumerated(ds):
        s = jnp.zeros(())
        for i, x in enumerate(ds):
            s = s + i * st.reduce("SUM", x, axis=0)
        return s
    with pytest.raises(sx.DistributionValueError, match="Python int `i` changes from step to step") as err:
        st.function(enumerated)(dist)
    assert_names_this_line(err, enumerated.__code__.co_firstlineno + 2)

    def data_break(it):
        a = jnp.zeros(())
        for x in it:
            a = a + st.reduce("SUM", x, axis=0)
            if a > 10:
                break
        return a
    assert float(values(LOOPS["iterator_tensor_break"])) == 28.0
    with pytest.raises(sx.DistributionTypeError, match="`if`, `while` or `break` on a value computed") as err:
        st.function(data_break)(iter(dist))
    assert_names_this_line(err, data_break.__code__.co_firstlineno + 4)


def test_iterating_what_is_not_an_argument_raises():
    # Intent: a dataset or iterator captured by closure cannot feed the program (its batches are
    # inputs): the error says which and to pass it as an argument.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    dist = st.experimental_distribute_dataset(numbers())
    it = iter(dist)
    with pytest.raises(sx.DistributionTypeError, match="iterating a distributed dataset that is not an arg") as err:
        line = here(); st.function(lambda: sum_loop(st, dist))()  # noqa: E702
    assert "train_epoch(dist_dataset)" in str(err.value)
    with pytest.raises(sx.DistributionTypeError, match="distributed iterator that is not an argument") as err:
        line = here(); st.function(lambda: next(it))()  # noqa: E702
    assert_names_this_line(err, line)
