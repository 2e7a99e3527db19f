"""TPUStrategy's logical devices: annotations, sharding propagation, and the lowering that
partitions within each replica while collectives stay across replicas."""
import importlib.util
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

_spec = importlib.util.spec_from_file_location(
    "model_parallel_mlp", pathlib.Path(__file__).parents[1] / "examples" / "model_parallel_mlp.py")
mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mlp)




def replica_groups(line: str) -> list[list[int]]:
    """The replica groups of one HLO collective, expanded to explicit device lists, whichever
    way XLA writes them: listed, iota (`[2,4]<=[8]`), or over named mesh axes (JAX 0.11:
    `mesh['replica'=2,'l0'=4] {'replica'}`, devices numbered row-major over the mesh)."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}", line)
    if m:
        axes = [(name.strip("'"), int(size)) for name, size in (a.split("=") for a in m.group(1).split(","))]
        over = {a.strip().strip("'") for a in m.group(2).split(",") if a.strip()}
        ids = np.arange(int(np.prod([size for _, size in axes]))).reshape([size for _, size in axes])
        order = [i for i, (name, _) in enumerate(axes) if name not in over] + \
                [i for i, (name, _) in enumerate(axes) if name in over]
        size = int(np.prod([size for name, size in axes if name in over]))
        return sorted(sorted(g) for g in ids.transpose(order).reshape(-1, size).tolist())
    m = re.search(r"replica_groups=\{(\{[\d,{}]*\})\}", line)
    if m:
        return sorted(sorted(int(d) for d in g.split(",")) for g in re.findall(r"\{([\d,]+)\}", m.group(1)))
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    assert m, line
    g, s = int(m.group(1)), int(m.group(2))
    dims = [int(d) for d in m.group(3).split(",")]
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    if m.group(4):
        ids = ids.transpose([int(p) for p in m.group(4).split(",")])
    return sorted(sorted(map(int, row)) for row in ids.reshape(g, s))


@pytest.mark.parametrize("replicas,logical", [(2, 4), (4, 2), (1, 8)])
def test_model_parallel_mlp_matches_one_device_jax(replicas, logical):
    # Intent: the hidden dimension split over the logical devices and the gradients
    # all-reduced over replicas give one-device JAX's numbers, step after step.
    strategy = sx.TPUStrategy(logical_devices_per_replica=logical)
    assert strategy.num_replicas_in_sync == replicas
    step = mlp.make_train_step(strategy)
    params, ref = mlp.init_params(), mlp.init_params()
    x, y = mlp.make_batch(replicas)
    dx, dy = mlp.distribute(strategy, x), mlp.distribute(strategy, y)
    ref_step = jax.jit(mlp.reference_step)
    for _ in range(3):
        loss, params = step(params, dx, dy)
        ref_loss, ref = ref_step(ref, x, y)
        np.testing.assert_allclose(strategy.experimental_local_results(loss)[0], ref_loss, rtol=1e-5)
    for k in ref:
        got = strategy.experimental_local_results(params[k])[0]
        np.testing.assert_allclose(np.asarray(got), ref[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("replicas,logical", [(2, 4), (4, 2)])
def test_mlp_hlo_is_split_per_device_and_all_reduces_over_replicas_only(replicas, logical):
    # Intent: the compiled program holds per-device split shapes (hidden / L), and the
    # gradient all-reduce runs over replica groups (one logical device of each replica).
    strategy = sx.TPUStrategy(logical_devices_per_replica=logical)
    step = mlp.make_train_step(strategy)
    params = mlp.init_params()
    x, y = mlp.make_batch(replicas)
    args = (params, mlp.distribute(strategy, x), mlp.distribute(strategy, y))
    hlo = step.hlo(*args)
    h = 64 // logical
    entry = next(line for line in hlo.splitlines() if line.startswith("ENTRY"))
    assert f"f32[16,{h}]" in entry and f"f32[{h},8]" in entry and f"f32[{h}]" in entry, entry
    assert "f32[16,64]" not in entry
    across = sorted([j + r * logical for r in range(replicas)] for j in range(logical))
    within = sorted([r * logical + j for j in range(logical)] for r in range(replicas))
    reduces = [line for line in hlo.splitlines() if " all-reduce(" in line or " all-reduce-start(" in line]
    groups = [replica_groups(line) for line in reduces]
    assert all(g in (across, within) for g in groups), groups
    gradient = [line for line, g in zip(reduces, groups) if g == across]
    assert gradient and any(f"f32[16,{h}]" in line for line in gradient), gradient
    assert step.ir(*args).count("sx.all_reduce") == 4  # three gradients and the loss


def test_split_to_logical_devices_splits_width_2_and_height_4():
    # Intent: the seed's example: [1, 2, 4, 1] with 8 logical devices splits width 2-way and
    # height 4-way; the compiled program works on (B, W/2, H/4, C) pieces.
    strategy = sx.TPUStrategy(logical_devices_per_replica=8)
    images = np.random.RandomState(0).randn(2, 4, 8, 3).astype(np.float32)

    def step(images):
        def replica_fn(t):
            t = strategy.experimental_split_to_logical_devices(t, [1, 2, 4, 1])
            return jnp.sum(jnp.sin(t) * 2.0, axis=(1, 2))
        return strategy.run(replica_fn, args=(images,))

    f = strategy.function(step)
    np.testing.assert_allclose(f(images), np.sum(np.sin(images) * 2.0, axis=(1, 2)), rtol=1e-5)
    ir = f.ir(images)
    assert 'axes = ((), ("l0",), ("l1", "l2"), ())' in ir
    assert "f32[2,4,8,3] mirrored split[{}, {l0}, {l1, l2}, {}]" in ir
    entry = next(line for line in f.hlo(images).splitlines() if line.startswith("ENTRY"))
    assert "f32[2,2,2,3]" in entry, entry


def test_assign_to_logical_device_places_value_on_that_device():
    # Intent: assign_to_logical_device(t, k) gives t a maximal sharding on logical device k
    # (visible in the lowered program's sharding); the numbers are unchanged.
    strategy = sx.TPUStrategy(logical_devices_per_replica=4)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    def replica_fn(x):
        t = strategy.experimental_assign_to_logical_device(jnp.cos(x) * 3.0, 3)
        return t + 1.0

    f = strategy.function(lambda x: strategy.run(replica_fn, args=(x,)))
    out = strategy.experimental_local_results(f(x))
    for o in out:
        np.testing.assert_allclose(o, np.cos(x) * 3.0 + 1.0, rtol=1e-6)
    assert "device[3]" in f.ir(x)
    text = f.stablehlo(x)
    assert "device_ids=[3]" in text and re.search(r"sdy.sharding_constraint %\S+ <@maximal_mesh_3, \[\]>", text)


def test_replicate_to_logical_devices_replicates():
    # Intent: replicate_to_logical_devices constrains the value to be whole on every logical
    # device, even right after a split.
    strategy = sx.TPUStrategy(logical_devices_per_replica=4)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)

    def replica_fn(x):
        t = strategy.experimental_split_to_logical_devices(x * 2.0, [1, 4])
        return strategy.experimental_replicate_to_logical_devices(t) - 1.0

    f = strategy.function(lambda x: strategy.run(replica_fn, args=(x,)))
    for o in strategy.experimental_local_results(f(x)):
        np.testing.assert_allclose(o, x * 2.0 - 1.0)
    assert "sx.replicate_to_logical_devices" in f.ir(x) and "replicated" in f.ir(x)
    text = f.stablehlo(x)
    assert re.search(r"sdy.sharding_constraint %\S+ <@mesh, \[\{\}, \{\}\]>", text), text
    assert re.search(r"sdy.sharding_constraint %\S+ <@mesh, \[\{\}, \{\"l0\", \"l1\"\}\]>", text), text


def test_device_assignment_build():
    # Intent: DeviceAssignment.build's computation_shape product is the logical devices per replica.
    da = sx.DeviceAssignment.build(num_replicas=2, computation_shape=[1, 2, 2, 1])
    strategy = sx.TPUStrategy(experimental_device_assignment=da)
    assert strategy.num_replicas_in_sync == 2 and strategy.logical_devices_per_replica == 4
    x = np.ones((2, 8), np.float32)
    values = strategy.experimental_distribute_values_from_function(lambda c: x[c.replica_id_in_sync_group])
    out = strategy.run(lambda v: strategy.experimental_split_to_logical_devices(v, [4]) * 3.0, args=(values,))
    for o in strategy.experimental_local_results(out):
        np.testing.assert_allclose(o, np.full((8,), 3.0))


# --- validation at trace time, naming the user's line ---------------------------------------
def _run_annotated(annotate, shape):
    """Trace `annotate(strategy, t)` in a replica function on 4 logical devices; return the
    raised error and the line that called the annotation."""
    strategy = sx.TPUStrategy(logical_devices_per_replica=4)
    lines = []

    def replica_fn(t):
        lines.append(here() + 1)
        return annotate(strategy, t)

    with pytest.raises(ValueError) as err:
        strategy.run(replica_fn, args=(np.ones(shape, np.float32),))
    return err, lines[0]


def test_split_wrong_rank():
    # Intent: partition_dimensions needs one entry per dimension.
    err, _ = _run_annotated(lambda s, t: s.experimental_split_to_logical_devices(t, [4]), (4, 4))
    assert_names_this_line(err, here() - 1)
    assert "rank" in str(err.value)


def test_split_product_not_logical_devices():
    # Intent: the split counts must multiply to the logical devices per replica.
    err, _ = _run_annotated(lambda s, t: s.experimental_split_to_logical_devices(t, [2, 1]), (4, 4))
    assert_names_this_line(err, here() - 1)
    assert "product" in str(err.value)


def test_split_dimension_does_not_divide():
    # Intent: each split dimension must be a multiple of its split count.
    err, _ = _run_annotated(lambda s, t: s.experimental_split_to_logical_devices(t, [1, 4]), (4, 6))
    assert_names_this_line(err, here() - 1)
    assert "size 6" in str(err.value)


@pytest.mark.parametrize("device", [-1, 4])
def test_assign_logical_device_out_of_range(device):
    # Intent: a logical device id outside [0, L) is refused.
    err, _ = _run_annotated(lambda s, t: s.experimental_assign_to_logical_device(t, device), (4,))
    assert_names_this_line(err, here() - 1)
    assert "out of range" in str(err.value)


# --- the IR: text round trip and the pass on text --------------------------------------------
PROPAGATE_BEFORE = """module @m attributes {num_replicas = 1, logical_axes = (("l0", 2), ("l1", 2))} {
  func @main(%x: f32[8,16] per_replica, %w: f32[16,32] mirrored) -> (f32[8] per_replica) {
    %ws = sx.split_to_logical_devices %w {partition_dimensions = (1, 4), axes = ((), ("l0", "l1"))} : f32[16,32] mirrored
    %h = jax.dot_general %x, %ws {dimension_numbers = (((1,), (0,)), ((), ())), precision = none, preferred_element_type = f32, out_sharding = none} : f32[8,32] per_replica
    %t = jax.neg %h : f32[8,32] per_replica
    %s = jax.reduce_sum %t {axes = (1,), out_sharding = none} : f32[8] per_replica
    return %s
  }
}
"""  # noqa: E501  IR text: one op a line, as the printer writes it


def test_propagate_sharding_forward_through_dot_elementwise_and_reduction():
    # Intent: the annotation flows to the dot's output (the split free dimension), through the
    # elementwise op, and a reduction over the split dimension leaves a replicated value.
    module = sx.ir.parse(PROPAGATE_BEFORE)
    assert sx.passes.get_pass("propagate-sharding").apply(module)  # it changed the module
    assert not sx.passes.get_pass("propagate-sharding").apply(module)  # and a second run does not
    text = sx.ir.print_module(module)
    assert "%w: f32[16,32] mirrored split[{}, {l0, l1}]" in text
    assert "%h = jax.dot_general" in text and "f32[8,32] per_replica split[{}, {l0, l1}]" in text
    assert "%t = jax.neg %h : f32[8,32] per_replica split[{}, {l0, l1}]" in text
    assert ": f32[8] per_replica replicated" in text
    assert sx.ir.print_module(sx.ir.parse(text)) == text


def test_sharding_types_round_trip_and_reject_garbage():
    # Intent: shardings print after the locality and parse back exactly; bad ones are ParseErrors.
    text = PROPAGATE_BEFORE.replace("%x: f32[8,16] per_replica,", "%x: f32[8,16] per_replica device[1],")
    assert sx.ir.print_module(sx.ir.parse(text)) == text
    with pytest.raises(sx.ir.ParseError):
        sx.ir.parse(PROPAGATE_BEFORE.replace("%x: f32[8,16] per_replica,", "%x: f32[8,16] per_replica split[l0],"))
