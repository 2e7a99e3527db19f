"""A reference interpreter: runs a module replica by replica, each op in NumPy where
`reference_numpy` has a rule for it and in plain eager JAX otherwise, with collectives computed
from the list of every replica's value. Slow and independent of `shard_map`, so tests can check
the compiled program against it."""
from __future__ import annotations

from typing import Sequence

from ..dialects import REFERENCE, generic_reference
from ..ir import Block, Locality, Module
from .reference_numpy import numpy_reference


class ReferenceContext:
    def __init__(self, replica_ids: Sequence[int], variables: dict | None = None):
        self.replica_ids = list(replica_ids)
        self.vars = {} if variables is None else variables  # symbol -> one value per replica

    @property
    def num_replicas(self) -> int:
        return len(self.replica_ids)

    def subset(self, positions: Sequence[int]) -> "ReferenceContext":
        """The replicas at `positions` alone (those taking one branch); `merge` writes back."""
        vars_ = {k: [v[p] for p in positions] for k, v in self.vars.items()}
        return ReferenceContext([self.replica_ids[p] for p in positions], vars_)

    def merge(self, sub: "ReferenceContext", positions: Sequence[int]) -> None:
        """Take the variables' values that the replicas at `positions` computed in `sub`."""
        for name, values in sub.vars.items():
            mine = list(self.vars[name])
            for p, v in zip(positions, values):
                mine[p] = v
            self.vars[name] = mine

    def run_block(self, block: Block, args: Sequence[Sequence]) -> list[list]:
        env = {id(a): list(x) for a, x in zip(block.args, args)}
        for op in block.ops:
            operands = [env[id(v)] for v in op.operands]
            rule = REFERENCE.get(op.name)
            outs = rule(op, operands, self) if rule is not None else numpy_reference(op, operands, self.num_replicas)
            if outs is None:  # a generic op NumPy has no rule for here
                outs = generic_reference(op, operands, self)
            for r, x in zip(op.results, outs):
                env[id(r)] = list(x)
        return [env[id(v)] for v in block.results]


def run_reference(module: Module, *inputs, num_replicas: int) -> list[list]:
    """Run `module.main` on `num_replicas` replicas. Inputs are main's arguments then the
    module's variables; a per_replica input is a sequence of components, any other is one value
    given to every replica. Returns, per result and then per variable, each replica's value."""
    main = module.main
    types = [a.type for a in main.body.args] + [v.type for v in module.vars]
    args = [list(x) if t.locality is Locality.PER_REPLICA else [x] * num_replicas
            for t, x in zip(types, inputs)]
    nargs = len(main.body.args)
    ctx = ReferenceContext(range(num_replicas), {v.name: a for v, a in zip(module.vars, args[nargs:])})
    results = ctx.run_block(main.body, args[:nargs])
    return results + [ctx.vars[v.name] for v in module.vars]
