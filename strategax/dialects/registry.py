"""The rule tables the backends read, keyed by op name; each dialect module fills in its ops'
rules right beside their declarations.

- `LOWERINGS[name](op, args, ctx) -> results`: the JAX backend (inside `shard_map` over the
  `replica` axis, `ctx` a `backends.LoweringContext`);
- `REFERENCE[name](op, args, ctx) -> results`: the reference interpreter (each operand and
  result a list holding one value per replica, `ctx` a `backends.ReferenceContext`).
"""
from __future__ import annotations

from typing import Callable

LOWERINGS: dict[str, Callable] = {}
REFERENCE: dict[str, Callable] = {}
