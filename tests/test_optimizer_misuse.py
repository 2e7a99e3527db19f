"""Optimizer.apply_gradients misused as a new user does (a dict of pairs, a read value where the
variable goes) raises a TypeError naming the user's line and the fix, inside a compiled replica
function; and the collective table says what its byte columns mean (tensor bytes vs bytes moved,
checked against the ring formula on the tensor's own size)."""
import jax.numpy as jnp
import optax
import pytest

import strategax as sx
from conftest import assert_names_this_line, here


def setup():
    s = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with s.scope():
        w = sx.Variable(jnp.ones(3), name="w")
        opt = sx.Optimizer(optax.sgd(0.1))
    return s, w, opt


@pytest.mark.parametrize("misuse", ["dict", "read_value"])
def test_apply_gradients_misuse_names_the_line_and_the_fix(misuse):
    # Intent: {"w": (g, w)} and [(g, w.read_value())] are TypeErrors at the user's line.
    s, w, opt = setup()
    lines = {}

    def fn():
        g = jnp.ones(3)
        if misuse == "dict":
            lines["at"] = here() + 1
            opt.apply_gradients({"w": (g, w)})
        else:
            lines["at"] = here() + 1
            opt.apply_gradients([(g, w.read_value())])

    step = s.function(lambda: s.run(fn))
    with pytest.raises(TypeError) as e:
        step()
    assert_names_this_line(e, lines["at"])


def test_collective_table_explains_tensor_bytes_and_bytes_moved():
    # Intent: one all-reduce of a f32[3] gradient on 2 replicas: tensor bytes 12, bytes moved
    # 2*(2-1)/2*12 = 12 per replica; the table names both columns and explains them.
    s, w, opt = setup()

    @s.function
    def step():
        s.run(lambda: opt.apply_gradients(
            [(jnp.ones(3) * sx.get_replica_context().replica_id_in_sync_group, w)]))

    stats = step.stats()
    table = stats.table()
    assert "tensor bytes" in table.splitlines()[0] and "bytes moved" in table.splitlines()[0]
    assert "ring algorithm" in table and "2(N-1)/N" in table
    (c,) = stats.collectives
    assert (c.payload_bytes, c.bytes_moved) == (12, 2 * (2 - 1) * 12 // 2)
