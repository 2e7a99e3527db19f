"""Structured control flow kept as ops with regions: `jax.cond`, `jax.while`, `jax.scan`.

Regions are isolated: a region sees only its block arguments, which the op's operands feed
(the same operand layout as the JAX primitive), and the module's variables, which its ops
name by symbol as anywhere else. The variables the regions update are the op's carried
state, listed in its `writes` attribute (`jax.while {..., writes = (@w, @b)}`; the verifier
checks the list): lowered, their current values enter `lax.switch` / `lax.while_loop` /
`lax.scan` as extra operands and carries and come back as extra results, so every update
inside a region, once per iteration, reaches the variable. Lowering traces each region under
the current mesh context.

This package declares the ops (here) and re-exports what passes and analyses read; one job per
file:
`operands` (the operand layout by role, the variables written), `verify` (the
verifier's checks), `flows` (how values pass through the regions, `REGION_OPS`),
`lowering` (to `lax.switch` / `while_loop` / `scan`) and `reference` (the
reference interpreter's).
"""
from __future__ import annotations

from ...ir import Attr, Int, OpDef, declare
from . import lowering, reference  # noqa: F401 - register the lowerings and references
from .flows import (REGION_OPS, Flow, RegionOpFacts, add_const, branch_predicate, flow_locality, invariant_flows,
                    region_flows, scanned_axes)
from .operands import CondOperands, ScanOperands, WhileOperands, operand_groups, region_writes, split_list
from .verify import check_writes, verify_cond, verify_scan, verify_while

__all__ = ["REGION_OPS", "CondOperands", "Flow", "RegionOpFacts", "ScanOperands", "WhileOperands", "add_const",
           "branch_predicate", "invariant_flows", "operand_groups", "region_flows", "region_writes",
           "scan_layout", "scanned_axes", "split_list"]

# The attributes are the primitive's parameters (the declared ones are checked; others, such
# as a scan's `linear`, pass through to the re-bound primitive), plus `writes`.
_WRITES = {"writes": Attr("symbols", required=False)}
declare(OpDef("jax.cond", "Run branch `index` (the first operand) on the other operands.",
              num_regions=None, attrs=_WRITES, open_attrs=True, verify=check_writes(verify_cond),
              locality=flow_locality))
declare(OpDef("jax.while", "Loop the body region while the cond region yields true.",
              num_regions=2, attrs={"cond_nconsts": Int(0), "body_nconsts": Int(0), **_WRITES},
              open_attrs=True, verify=check_writes(verify_while), locality=flow_locality))


def scan_layout(params: dict) -> dict:
    """`num_consts` and `num_carry` from a scan's JAX parameters: JAX 0.10 has them; JAX 0.11
    says the layout as `ft_in`, a flat tree (consts, carry, xs) of the operands."""
    if "num_carry" in params or "ft_in" not in params:
        return {}
    consts, carry, _ = params["ft_in"].unpack()  # a tuple of three, or a pytree of three (after AD)
    return {"num_consts": len(consts), "num_carry": len(carry)}


declare(OpDef("jax.scan", "Loop the body over the leading axis of xs, threading a carry.",
              num_regions=1, attrs={"length": Int(0), "num_consts": Int(0), "num_carry": Int(0),
                                    "reverse": Attr("bool"), **_WRITES},
              open_attrs=True, verify=check_writes(verify_scan), locality=flow_locality))


