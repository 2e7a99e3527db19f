"""The axis table's census (issue 24 item 3): every primitive JAX registers (batching, lowering,
JVP and transpose rules, and jax.extend's list) is handled by the one per-op axis table both
axis analyses read (derived from JAX's batching rule, or an entry), kept as a region or inlined
by the importer, or listed as unsupported with a reason. A primitive a new JAX version adds
fails this test until it is placed."""
import os
import subprocess
import sys

import jax
import jax.extend.core.primitives as exported
import jax.numpy as jnp  # noqa: F401  (each import registers its primitives)
import jax.scipy  # noqa: F401
import numpy as np
from jax._src import core
from jax._src.interpreters import ad, batching, mlir

import strategax as sx
from strategax.dialects import INLINED_PRIMITIVES
from strategax.passes.axis_rules import ENTRIES, REDUCTIONS, UNSUPPORTED, batching_kind, rule

REGIONS = {"cond", "while", "scan"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def registered() -> dict[str, core.Primitive]:
    prims = {}
    for table in (batching.fancy_primitive_batchers, mlir._lowerings, ad.primitive_jvps,
                  ad.primitive_transposes):
        prims.update((p.name, p) for p in table)
    prims.update((p.name, p) for p in vars(exported).values() if isinstance(p, core.Primitive))
    return {n: p for n, p in prims.items() if not n.startswith(("sx.", "sx_", "strategax_"))}  # ours


def placed(name: str, prim) -> str | None:
    kind = batching_kind(prim)
    if kind in ("broadcast", "vectorized") or (kind == "reducer" and f"jax.{name}" in REDUCTIONS):
        return f"derived ({kind})"
    if f"jax.{name}" in ENTRIES:
        return "entry"
    if name in REGIONS:
        return "region"
    if name in INLINED_PRIMITIVES:
        return "inlined"
    return next((reason for reason, names in UNSUPPORTED.items() if name in names), None)


def test_every_registered_primitive_is_handled_or_listed_with_a_reason():
    # Intent: the census: no primitive falls through unnoticed; the unsupported list stays short
    # (a handful of reasons) and names only primitives JAX has. Taken in a fresh process, so the
    # primitives other tests define (test_jax_params' new one) do not count.
    code = ("import sys; sys.path.insert(0, 'tests'); import test_axis_census as t; p = t.registered(); "
            "print(len(p)); print(' '.join(sorted(n for n, x in p.items() if t.placed(n, x) is None)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    count, missing = out.stdout.splitlines()[-2:]
    assert int(count) > 200
    assert not missing.split(), f"primitives with no axis rule and no reason: {missing}"
    prims = registered()
    listed = {n for names in UNSUPPORTED.values() for n in names}
    assert len(UNSUPPORTED) <= 10
    assert not listed & {n for n, p in prims.items() if (placed(n, p) or "").startswith(
        ("entry", "region", "inlined", "derived"))}


def test_the_table_is_derived_from_jax_where_jax_can_tell():
    # Intent: most elementwise primitives (add, tanh, mulhi, philox...) come from their batching
    # rules, not a hand-written list; a new elementwise primitive would be found the same way.
    prims = registered()
    derived = [n for n, p in prims.items() if (placed(n, p) or "").startswith("derived")]
    assert {"add", "tanh", "exp", "reduce_sum", "mulhi"} <= set(derived)
    assert len(derived) >= 90


def test_sharding_stops_at_a_reversed_split_axis():
    # Intent: propagate-sharding reads the same table: a reversal (or cumsum) along the split
    # axis passes no split on that axis (before, unknown ops were treated as elementwise, so XLA
    # had to undo the sharding), while the other axis keeps its split.
    text = """module @m attributes {num_replicas = 2, logical_axes = (("l0", 2),)} {
  func @main(%x: f32[4,6] per_replica) -> (f32[4,6], f32[4,6]) {
    %s = sx.split_to_logical_devices %x {partition_dimensions = (2, 1), axes = (("l0",), ())} : f32[4,6]
    %r = jax.rev %s {dimensions = (0,)} : f32[4,6]
    %c = jax.cumsum %s {axis = 0, reverse = false} : f32[4,6]
    return %r, %c
  }
}
"""
    module = sx.ir.parse(text)
    sx.passes.get_pass("propagate-sharding").apply(module)
    out = str(module)
    assert "%r = jax.rev %s {dimensions = (0,)} : f32[4,6] replicated" in out, out
    assert "%c = jax.cumsum %s {axis = 0, reverse = false} : f32[4,6] replicated" in out, out


def test_linear_algebra_is_row_wise_over_its_batch_axes():
    # Intent: a batched Cholesky over per-example matrices is row-wise: a partial batch's padded
    # rows do not reach the real rows' results, and the row sum counts only real rows.
    strategy = sx.MirroredStrategy()
    a = np.random.default_rng(0).normal(size=(16 + 5, 3, 3)).astype(np.float32)
    spd = np.einsum("bij,bkj->bik", a, a) + 3 * np.eye(3, dtype=np.float32)
    step = strategy.function(lambda b: strategy.run(lambda m: jnp.sum(jnp.linalg.cholesky(m)), args=(b,)))
    for batch in strategy.experimental_distribute_dataset(sx.data.Dataset.from_tensor_slices(spd).batch(16)):
        got = [float(v) for v in strategy.experimental_local_results(step(batch))]
        want = [float(np.sum(np.linalg.cholesky(np.asarray(v)))) for v in strategy.experimental_local_results(batch)]
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_rule_of_an_unknown_op_is_none():
    # Intent: an op the table does not know gives no rule (the analyses follow nothing through it).
    op = sx.ir.Operation("jax.not_a_primitive", [], [])
    assert rule(op) is not None  # no operands: moves no axis
    x = sx.ir.Value(sx.ir.TensorType((2,), np.dtype("float32")))
    assert rule(sx.ir.Operation("jax.not_a_primitive", [x], [sx.ir.Value(x.type)])) is None
