"""An `sx.range` loop taking its batches inside a compiled function gets them stacked over its
steps (issue 36): batches the pipeline left on the host are stacked there and placed with one
transfer per input, batches already placed are stacked on the devices. Every way ends with the
weights of the same SGD steps written in plain JAX on one device, partial and empty replica
batches included."""
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_multi_step import GLOBAL_BATCH, LR, linear_model
from test_multi_step import batches as global_batches

import strategax as sx
from strategax.backends import transfer
from strategax.trace.batches.host_element import HostElement

STEPS = 5


@jax.jit
def _reference_step(w, b, x, y):
    def loss(w_, b_):
        return jnp.sum((x @ w_ + b_ - y) ** 2) / GLOBAL_BATCH
    gw, gb = jax.grad(loss, argnums=(0, 1))(w, b)
    return w - LR * gw, b - LR * gb


def reference(batches):
    """Plain JAX on one device: SGD over the real rows of each global batch."""
    w, b = jnp.zeros(3), jnp.float32(0.0)
    for x, y in batches:
        w, b = _reference_step(w, b, jnp.asarray(x), jnp.asarray(y))
    return np.asarray(w), float(b)


def model(st):
    w, b, step = linear_model(st)

    @st.function
    def train(iterator):
        for _ in sx.range(STEPS):
            loss = st.run(step, args=(next(iterator),))
        return st.reduce("SUM", loss)

    return w, b, train


def epoch(train, iterator) -> int:
    """Loop calls until the iterator runs out; the number of calls that ran."""
    calls = 0
    while True:
        try:
            train(iterator)
        except sx.OutOfRangeError:
            return calls
        calls += 1


def assert_weights(w, b, batches):
    w_ref, b_ref = reference(batches)
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), b_ref, rtol=1e-5, atol=1e-6)


def test_loops_over_host_stacked_batches_match_plain_jax_with_partial_and_empty_replica_batches():
    # Intent: 14 batches (the last of 6 rows: replicas 6 and 7 get none) in loops of 5 steps on
    # 8 replicas. The first epoch's iterator was placing ahead when the loop began (its first
    # batches placed, the rest left on the host: stacked on the devices); once loops read the
    # dataset, the next epoch's batches all stay on the host and are stacked there.
    st = sx.MirroredStrategy()
    batches = global_batches(13 * GLOBAL_BATCH + 6)
    w, b, train = model(st)
    dataset = st.experimental_distribute_dataset(batches)
    assert epoch(train, iter(dataset)) == 3  # 5 + 5 + 4 steps
    assert_weights(w, b, batches)
    second: Any = iter(dataset)
    assert isinstance(second._peek(), HostElement)  # the host-stacked path is the one under test
    assert epoch(train, second) == 3
    assert_weights(w, b, batches + batches)


def test_the_pipeline_runs_a_loops_steps_ahead_once_loops_read_it():
    # Intent: a loop of 5 steps takes 5 elements per call; handed over one at a time through a
    # prefetch buffer of 1, each would wait on the pipeline's thread. Once a loop read the
    # dataset, its iterators make up to 5 host elements ahead (the call's batches, stacked
    # anyway); the weights stay plain JAX's.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batches = global_batches(10 * GLOBAL_BATCH)
    w, b, train = model(st)
    dataset = st.experimental_distribute_dataset(batches)
    train(iter(dataset))
    second: Any = iter(dataset)
    second._peek()
    deadline = time.monotonic() + 30
    while second._source._queue.qsize() < STEPS - 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # the producer fills the buffer: STEPS - 1 queued, one peeked
    assert second._source._queue.qsize() == STEPS - 1
    assert epoch(train, second) == 2
    assert_weights(w, b, batches[:STEPS] + batches)


def test_next_one_at_a_time_after_loops_gives_each_replica_its_rows():
    # Intent: an element left on the host is placed when it is taken by itself: replica i gets
    # rows [i*k, (i+1)*k) of the global batch, a partial batch's real rows only.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batches = global_batches(GLOBAL_BATCH + 6)
    w, b, train = model(st)
    dataset = st.experimental_distribute_dataset(batches)
    train(iter(dataset))  # a loop reads the dataset: its next iterators leave batches on the host
    it: Any = iter(dataset)
    assert isinstance(it._peek(), HostElement)
    for x, y in batches:
        px, py = next(it)
        half = -(-len(x) // 2)
        for r, (cx, cy) in enumerate(zip(px.values, py.values)):
            np.testing.assert_array_equal(np.asarray(cx), x[r * half:(r + 1) * half])
            np.testing.assert_array_equal(np.asarray(cy), y[r * half:(r + 1) * half])
    with pytest.raises(StopIteration):
        next(it)


def test_loop_over_a_generator_that_refills_one_array_keeps_each_batch():
    # Intent: batches kept on the host until a loop stacks them are copies: a generator that
    # refills the array it yielded (allowed: the pipeline reads the next batch only after the
    # previous one is split) does not change batches already read.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batches = global_batches(4 * GLOBAL_BATCH)

    class Refilling:
        def __iter__(self):
            x, y = np.empty_like(batches[0][0]), np.empty_like(batches[0][1])
            for bx, by in batches:
                x[...], y[...] = bx, by
                yield x, y

    w, b, train = model(st)
    dataset = st.experimental_distribute_dataset(Refilling())
    for _ in range(3):  # the later epochs are read by loops from their start (batches left on the host)
        assert epoch(train, iter(dataset)) == 1
    assert_weights(w, b, batches * 3)


def test_loop_over_placed_batches_of_datasets_from_function_matches_plain_jax():
    # Intent: per-replica batches that come placed (distribute_datasets_from_function) are
    # stacked over the steps on the devices; the same weights as the global batches in plain JAX.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    batches = global_batches(10 * GLOBAL_BATCH)
    halves = [(x[k:k + 4], y[k:k + 4]) for x, y in batches for k in (0, 4)]
    w, b, train = model(st)
    dataset = st.distribute_datasets_from_function(lambda ctx: halves)
    assert epoch(train, iter(dataset)) == 2
    assert_weights(w, b, batches)


@pytest.mark.parametrize("shape,dtype", [((16, 3), np.float32), ((8,), np.int32), ((24, 2, 2), np.bool_)])
def test_transfer_places_host_arrays_as_jax_device_put_does(shape, dtype):
    # Intent: the pipeline's one-transfer placement gives jax.device_put's global array: same
    # sharding, values, dtype, each device holding its rows.
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("replica",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("replica"))
    host = (np.arange(np.prod(shape)) % 5).reshape(shape).astype(dtype)
    [got] = transfer.device_put([host], [sharding])
    want = jax.device_put(host, sharding)
    assert got.sharding == want.sharding and got.dtype == want.dtype and not got.weak_type
    np.testing.assert_array_equal(np.asarray(got), host)
    rows = shape[0] // 8
    for shard in got.addressable_shards:
        i = mesh.devices.tolist().index(shard.device)
        np.testing.assert_array_equal(np.asarray(shard.data), host[i * rows:(i + 1) * rows])


def test_placed_batches_of_a_generator_that_refills_one_array_keep_their_values():
    # Intent: the pipeline transfers its own copy of each batch: on the CPU JAX's transfer of a
    # NumPy array may read (or alias) it after returning, and a generator refilling the array
    # it yielded changed batches already placed (seen before the fix: batch 0's replicas 3-7
    # held batch 1's rows). A race: it may pass without the copy, never fail with it.
    st = sx.MirroredStrategy()
    values = [np.full((4096, 256), k, np.float32) for k in range(5)]

    def refilling():
        x = np.empty_like(values[0])
        for v in values:
            x[...] = v
            yield x

    options = sx.InputOptions(experimental_per_replica_buffer_size=4)
    placed = list(st.experimental_distribute_dataset(refilling(), options))
    assert len(placed) == 5
    for k, element in enumerate(placed):
        for component in element.values:
            np.testing.assert_array_equal(np.asarray(component), values[k][:512])
