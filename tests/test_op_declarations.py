"""The "Adding an op" checklist of docs/ir.md, checked for every `sx.*` op a dialect declares:
a lowering and a reference rule, a traffic class for each collective (what `stats` charges),
an axis rule or a stated reason for having none; and the bytes `stats` charges per class
against the ring formulas."""
from __future__ import annotations

import strategax as sx
from strategax.dialects import LOWERINGS, REFERENCE
from strategax.ir import OP_DEFS, TRAFFIC
from strategax.ir.analysis import collective_stats
from strategax.passes.axis_rules import ENTRIES

SX_OPS = sorted(name for name in OP_DEFS if name.startswith("sx."))

# sx ops neither analysis follows axes through, and why (a new op goes in ENTRIES or here)
NO_AXIS_RULE = {
    "sx.var_assign": "an update: no result", "sx.var_assign_add": "an update: no result",
    "sx.var_assign_sub": "an update: no result",
    "sx.broadcast": "not followed: a padded row reaching it is a gap, a sharding stops there",
    "sx.all_reduce_bucket": "made by fuse-collectives, after both analyses have run",
    "sx.reduce_scatter_bucket": "made by fuse-collectives, after both analyses have run",
    "sx.convert": "made by compress-collectives, after mask-padding; a sharding stops there",
}


def test_every_sx_op_has_its_rules():
    # Intent: no sx op lowers by accident through the generic path or lacks a reference rule.
    assert {"sx.all_reduce", "sx.all_gather", "sx.broadcast", "sx.var_read"} <= set(SX_OPS)
    for name in SX_OPS:
        assert name in LOWERINGS, f"{name}: no LOWERINGS rule"
        assert name in REFERENCE, f"{name}: no REFERENCE rule"
        assert name in ENTRIES or name in NO_AXIS_RULE or OP_DEFS[name].num_operands == 0, \
            f"{name}: no axis rule (passes/axis_rules.py ENTRIES) and no reason for none"


def test_every_collective_declares_its_traffic():
    collectives = [d for d in OP_DEFS.values() if d.is_collective]
    assert len(collectives) >= 5
    for d in collectives:
        assert d.traffic in TRAFFIC, f"{d.name}: traffic {d.traffic!r}, not one of {list(TRAFFIC)}"
    assert not [d.name for d in OP_DEFS.values() if d.identity_on_one_replica and not d.is_collective]


def test_stats_charge_each_traffic_class_its_ring_bytes():
    # Intent: 4 replicas, f32[8] (32 bytes): an all-reduce sends 2 * 3/4 * 32 = 48 bytes, an
    # all-gather of f32[8] pieces (a 128-byte result) 3/4 * 128 = 96, a broadcast (lowered as a
    # tree of point-to-point sends: every other replica receives the 32 bytes once) 3/4 * 32 = 24.
    module = sx.ir.parse("""module @m attributes {num_replicas = 4} {
  func @main(%x: f32[8] per_replica) -> (f32[8] mirrored, f32[32] mirrored, f32[8] mirrored) {
    %a = sx.all_reduce %x {op = "sum", reason = "r"} : f32[8] mirrored
    %g = sx.all_gather %x {axis = 0, num_replicas = 4, reason = "g"} : f32[32] mirrored
    %b = sx.broadcast %x {source = 0, reason = "b"} : f32[8] mirrored
    return %a, %g, %b
  }
}
""")
    stats = collective_stats(module)
    assert [(c.kind, c.bytes_moved) for c in stats.collectives] == [("sum", 48), ("gather", 96), ("broadcast", 24)]
    assert stats.bytes_per_replica == 48 + 96 + 24


def test_broadcast_tree_gives_every_replica_the_source_value():
    # Intent: the point-to-point tree that lowers sx.broadcast reaches every replica, for replica
    # counts that are not powers of two and any source: each replica ends with the source's
    # value (checked against NumPy: component `source` of the input, everywhere), bools too.
    import jax
    import numpy as np
    for n, source in [(2, 1), (3, 2), (5, 0), (6, 4), (7, 3), (8, 5)]:
        for dtype, t in ((np.float32, "f32"), (np.bool_, "bool")):
            module = sx.ir.parse(f"""module @m attributes {{num_replicas = {n}}} {{
  func @main(%x: {t}[2] per_replica) -> ({t}[2] mirrored) {{
    %b = sx.broadcast %x {{source = {source}, reason = "b"}} : {t}[2] mirrored
    return %b
  }}
}}
""")
            comps = [(np.arange(2) + 10 * r).astype(dtype) if dtype != np.bool_ else
                     np.asarray([r % 2 == 1, r == source]) for r in range(n)]
            mesh = sx.backends.make_mesh(jax.devices()[:n])
            out = sx.backends.Executable(module, mesh)(np.concatenate(comps))[0]
            copies = [np.asarray(s.data) for s in out.addressable_shards]  # every replica's copy
            assert len(copies) == n
            for r, copy in enumerate(copies):
                np.testing.assert_array_equal(copy, comps[source], err_msg=f"{n} replicas, source {source}, {t}: {r}")
