"""The input pipeline's host copies come from a pool (issue 36: a fresh 1 MiB copy cost more in
page faults than the copy itself): a buffer is handed out again only once nothing refers to it,
so a placed batch that uses its host copy in place (XLA:CPU) keeps its values for as long as it
lives. Values against the host batches they came from."""
import numpy as np

import strategax as sx
from strategax.backends.transfer import ALIGN, HostPool


def test_a_buffer_is_reused_only_when_no_view_of_it_is_left():
    # Intent: reuse is decided by references: the array handed out, or any view of it (what a
    # transfer keeps), holds its buffer; once all are gone the same memory comes back, zeroed
    # when no fill is given, and every array starts at an ALIGN-byte boundary.
    pool = HostPool(limit=4)
    ones, twos = np.ones((4, 8), np.float32), np.full((4, 8), 2, np.float32)
    a = pool.array((4, 8), np.float32, ones)
    b = pool.array((4, 8), np.float32, twos)
    assert a.ctypes.data != b.ctypes.data and a.ctypes.data % ALIGN == 0 and b.ctypes.data % ALIGN == 0
    np.testing.assert_array_equal(a, ones)
    where = a.ctypes.data
    piece = a[1:]  # a view, as a transfer keeps the per-device rows
    del a
    c = pool.array((4, 8), np.float32)
    assert c.ctypes.data not in (where, b.ctypes.data)
    np.testing.assert_array_equal(piece, ones[1:])
    del piece
    d = pool.array((4, 8), np.float32)
    assert d.ctypes.data == where and pool.created == 3
    np.testing.assert_array_equal(d, np.zeros((4, 8), np.float32))  # the buffer held ones


def test_when_every_buffer_is_busy_a_new_one_replaces_the_oldest():
    # Intent: batches held for long (a list of placed elements) do not stop reuse for good.
    pool = HostPool(limit=2)
    held = [pool.array((16,), np.int32, np.full(16, k, np.int32)) for k in range(3)]
    assert [int(x[0]) for x in held] == [0, 1, 2]
    del held[2]
    again = pool.array((16,), np.int32)
    assert pool.created == 3 and again.ctypes.data not in (held[0].ctypes.data, held[1].ctypes.data)


def test_placed_batches_keep_their_values_while_later_epochs_reuse_host_copies():
    # Intent: on the CPU a placed batch uses its host copy in place; later epochs of the same
    # dataset reuse copies only once their batches are gone, never one still in use (elements
    # kept from the first epoch hold their rows; every later one holds its own).
    st = sx.MirroredStrategy()
    n = st.num_replicas_in_sync
    batches = [(np.full((8 * n, 32), k, np.float32), np.arange(8 * n, dtype=np.int32) + 100 * k) for k in range(6)]

    def check(element, k):
        x, y = element
        for r in range(n):
            np.testing.assert_array_equal(np.asarray(x.values[r]), batches[k][0][8 * r:8 * (r + 1)])
            np.testing.assert_array_equal(np.asarray(y.values[r]), batches[k][1][8 * r:8 * (r + 1)])

    for options in (sx.InputOptions(experimental_per_replica_buffer_size=2),
                    sx.InputOptions(experimental_fetch_to_device=False)):
        dataset = st.experimental_distribute_dataset(batches, options)
        kept = list(dataset)
        for _ in range(3):
            for k, element in enumerate(dataset):
                check(element, k)
        for k, element in enumerate(kept):
            check(element, k)
        assert dataset._pool.created < 4 * len(batches) * 2  # some copies were reused (2 leaves a batch)
