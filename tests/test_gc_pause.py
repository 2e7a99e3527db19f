"""The garbage collector is paused while a program is traced, passed and lowered
(backends/gc_pause.py) and comes back as it was: on after a first call, off when the user had
turned it off, on after a trace that raised; the program's numbers are one-device NumPy's."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import strategax as sx

N = 8


@pytest.fixture
def st():
    return sx.MirroredStrategy()


def test_paused_while_tracing_and_restored_after(st):
    seen = []

    @st.function
    def step(x):
        seen.append(gc.isenabled())  # runs while the function is traced
        return st.run(lambda v: v * 2.0 + 1.0, args=(x,))

    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    out = step(st.experimental_distribute_values_from_function(lambda c: x[c.replica_id_in_sync_group]))
    np.testing.assert_allclose(np.stack(st.experimental_local_results(out)), x * 2.0 + 1.0)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off(st):
    @st.function
    def step(x):
        return st.run(lambda v: v - 1.0, args=(x,))

    gc.disable()
    try:
        out = step(st.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group)))
        assert not gc.isenabled()
    finally:
        gc.enable()
    np.testing.assert_allclose(np.stack(st.experimental_local_results(out)), np.arange(N) - 1.0)


def test_restored_after_a_trace_that_raises(st):
    @st.function
    def step(x):
        raise ValueError("the user's own error")

    with pytest.raises(ValueError, match="the user's own error"):
        step(np.ones(3, np.float32))
    assert gc.isenabled()
