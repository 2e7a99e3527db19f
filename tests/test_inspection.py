"""What the compiled program says about itself: the HLO's metadata names each IR op and the
user's line, a profiled run's trace names the all-reduce after the IR, and `f.stats().memory`
equals XLA's memory analysis of the program (and of the same step written by hand in JAX)."""
import gzip
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import assert_names_this_line, here
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import strategax as sx
from strategax.trace.inspection import hlo_metadata

N, ROWS, FEATURES = 8, 4, 6
THIS_FILE = os.path.relpath(__file__)


def data():
    x = np.arange(N * ROWS * FEATURES, dtype=np.float32).reshape(N * ROWS, FEATURES) / 100
    return x, (x @ np.linspace(-1, 1, FEATURES)).astype(np.float32)


def model(strategy):
    """A linear model trained by Adam on the all-reduced gradient; returns (w, optimizer, step, lines)."""
    with strategy.scope():
        w = sx.Variable(jnp.zeros(FEATURES), name="w")
        optimizer = sx.Optimizer(optax.adam(0.1))
    lines = {}

    def replica_fn(batch):
        x, y = batch
        lines["grad"] = here() + 1
        loss, g = jax.value_and_grad(lambda w_: jnp.mean((x @ w_ - y) ** 2))(w.read_value())
        lines["all_reduce"] = here() + 1
        g = sx.get_replica_context().all_reduce("MEAN", g)
        optimizer.apply_gradients([(g, w)])
        return loss

    @strategy.function
    def step(batch):
        return strategy.run(replica_fn, args=(batch,))  # per replica: no second collective

    return w, optimizer, step, lines


def batch_of(strategy):
    x, y = data()
    return next(iter(strategy.experimental_distribute_dataset([(x, y)])))


def test_hlo_where_the_backend_keeps_no_text_is_a_named_error(monkeypatch):
    # Intent: where XLA keeps no HLO text of the compiled program (JAX's Compiled.as_text()
    # returns None on such a backend), f.hlo() raises a located error saying what to read
    # instead; it never returns None where it promises text.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    step = strategy.function(lambda x: x + 1.0)
    monkeypatch.setattr(jax.stages.Compiled, "as_text", lambda self: None)
    with pytest.raises(sx.DistributionRuntimeError, match=r"(?s)no HLO text.*f\.stablehlo") as err:
        line = here(); step.hlo(jnp.ones(2))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_compiled_hlo_names_each_ir_op_and_the_users_line():
    # Intent: every XLA instruction lowered from the IR names its IR op (a collective with its
    # reason) and the user's file:line; the all-reduce XLA runs is the IR's all_reduce, at the
    # line that called all_reduce, and the step still computes the right numbers.
    strategy = sx.MirroredStrategy()
    w, _, step, lines = model(strategy)
    batch = batch_of(strategy)
    text = step.hlo(batch)
    meta = hlo_metadata(text)
    all_reduces = [line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%")
                   for line in text.splitlines() if " all-reduce(" in line]
    assert len(all_reduces) == 1
    m = meta[all_reduces[0]]
    assert m.ir_op == "sx.all_reduce (ReplicaContext.all_reduce)"
    assert "/sx.all_reduce (ReplicaContext.all_reduce)/" in m.op_name
    assert (m.file, m.line) == (THIS_FILE, lines["all_reduce"])
    dots = [m_ for name, m_ in meta.items() if m_.ir_kind == "jax.dot_general"]
    assert dots and all((d.file, d.line) == (THIS_FILE, lines["grad"]) for d in dots)
    assert f'"{THIS_FILE}"' in text  # XLA's own table of file names holds the user's file
    # the numbers: one Adam step from zero moves every weight by -lr * sign(mean gradient)
    x, y = data()
    def grad(xr, yr):
        return jax.grad(lambda w_: jnp.mean((xr @ w_ - yr) ** 2))(jnp.zeros(FEATURES))
    grads = [grad(x[r * ROWS:(r + 1) * ROWS], y[r * ROWS:(r + 1) * ROWS]) for r in range(N)]
    step(batch)
    np.testing.assert_allclose(w.numpy(), -0.1 * np.sign(np.mean(grads, axis=0)), rtol=1e-4)


@pytest.mark.no_round_trip  # the round-trip check would run the program a 4th time, in the trace
def test_profiled_run_names_the_all_reduce_after_the_ir(tmp_path, capsys):
    # Intent: sx.profile runs N steps under JAX's profiler; in the trace it writes, the event of
    # the program's all-reduce (XLA's `psum.N`, found by the HLO's own opcode) carries the IR's
    # name and the user's line, and the printed summary lists the collective first.
    strategy = sx.MirroredStrategy()
    w, _, step, lines = model(strategy)
    batch = batch_of(strategy)
    result = sx.profile(step, batch, steps=3, logdir=tmp_path)
    assert capsys.readouterr().out.startswith("sx.profile: step, 3 step(s)")
    text = step.hlo(batch)
    (all_reduce,) = [line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%")
                     for line in text.splitlines() if " all-reduce(" in line]
    with gzip.open(result.trace_file, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ours = [e for e in events if e.get("args", {}).get("hlo_op") == all_reduce]
    assert len(ours) == 3 * N  # every step on every device
    assert {e["name"] for e in ours} == {f"sx.all_reduce (ReplicaContext.all_reduce) {THIS_FILE}:{lines['all_reduce']}"}
    assert result.rows[0].kind == "sx.all_reduce" and result.rows[0].collective
    assert result.rows[0].events == 3 * N and result.devices == N
    assert list((tmp_path / "plugins" / "profile").glob("*/*.xplane.pb"))  # TensorBoard's input
    assert w.numpy().shape == (FEATURES,) and np.all(np.abs(w.numpy()) > 0)  # the steps ran


def test_memory_table_equals_xla_memory_analysis():
    # Intent: f.stats().memory splits XLA's own analysis of the compiled step: variables and
    # Adam's slots (by their shapes), the batch, outputs, temporaries and peak; the inputs also
    # equal those of the same step written by hand as jax.jit(shard_map).
    strategy = sx.MirroredStrategy()
    _, _, step, _ = model(strategy)
    batch = batch_of(strategy)
    memory = step.stats(batch).memory
    analysis = step.lowered(batch).compile().memory_analysis()
    f32 = 4
    assert memory.variables == FEATURES * f32  # w
    assert memory.optimizer_slots == 2 * FEATURES * f32 + 4 + 4  # mu, nu, Adam's count, iterations
    row_count = 4  # a distributed batch also hands each replica its count of real rows (int32)
    assert memory.arguments == ROWS * FEATURES * f32 + ROWS * f32 + row_count  # this replica's x, y
    assert memory.inputs == analysis.argument_size_in_bytes
    assert memory.donated == analysis.alias_size_in_bytes == memory.variables + memory.optimizer_slots
    assert memory.outputs == analysis.output_size_in_bytes - analysis.alias_size_in_bytes
    assert memory.temporaries == analysis.temp_size_in_bytes
    assert memory.peak == analysis.peak_memory_in_bytes
    assert "memory per device" in str(step.stats(batch))

    # the same step by hand: the same buffers in
    mesh = Mesh(np.array(jax.devices()[:N]), ("r",))
    tx = optax.adam(0.1)

    def hand(w, state, iterations, x, y):
        g = jax.lax.pmean(jax.grad(lambda w_: jnp.mean((x @ w_ - y) ** 2))(w), "r")
        updates, state = tx.update(g, state, w)
        return optax.apply_updates(w, updates), state, iterations + 1

    w0 = jnp.zeros(FEATURES)
    state = tx.init(w0)
    x, y = data()
    rep = NamedSharding(mesh, P())
    args = (jax.device_put(w0, rep), jax.device_put(state, rep), jax.device_put(jnp.int32(0), rep),
            jax.device_put(x, NamedSharding(mesh, P("r"))), jax.device_put(y, NamedSharding(mesh, P("r"))))
    mapped = jax.shard_map(hand, mesh=mesh, in_specs=(P(), P(), P(), P("r"), P("r")), out_specs=(P(), P(), P()))
    reference = jax.jit(mapped, donate_argnums=(0, 1, 2)).lower(*args).compile().memory_analysis()
    assert memory.inputs == reference.argument_size_in_bytes + row_count
