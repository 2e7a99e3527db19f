"""A reference interpreter: runs a module replica by replica in plain eager JAX, with
collectives computed from the list of every replica's value. Slow and independent of
`shard_map`, so tests can check the compiled program against it."""
from __future__ import annotations

from typing import Sequence

from ..ir import REFERENCE, Block, Locality, Module, lookup
from ..ir.opdefs import bind_params


class ReferenceContext:
    def __init__(self, replica_ids: Sequence[int]):
        self.replica_ids = list(replica_ids)

    @property
    def num_replicas(self) -> int:
        return len(self.replica_ids)

    def subset(self, positions: Sequence[int]) -> "ReferenceContext":
        return ReferenceContext([self.replica_ids[p] for p in positions])

    def run_block(self, block: Block, args: Sequence[Sequence]) -> list[list]:
        env = {id(a): list(x) for a, x in zip(block.args, args)}
        n = self.num_replicas
        for op in block.ops:
            operands = [env[id(v)] for v in op.operands]
            rule = REFERENCE.get(op.name)
            if rule is not None:
                outs = rule(op, operands, self)
            else:
                prim = lookup(op.name).primitive
                per_replica = []
                for r in range(n):
                    args = [x[r] for x in operands]
                    per_replica.append(prim.bind(*args, **bind_params(op, args)))
                if prim.multiple_results:
                    outs = [[per_replica[r][k] for r in range(n)] for k in range(len(op.results))]
                else:
                    outs = [per_replica]
            for r, x in zip(op.results, outs):
                env[id(r)] = list(x)
        return [env[id(v)] for v in block.results]


def run_reference(module: Module, *inputs, num_replicas: int) -> list[list]:
    """Run `module.main` on `num_replicas` replicas. A per_replica input is a sequence of
    components; any other input is one value given to every replica. Returns, per result, the
    list of each replica's value."""
    main = module.main
    args = [list(x) if a.type.locality is Locality.PER_REPLICA else [x] * num_replicas
            for a, x in zip(main.body.args, inputs)]
    return ReferenceContext(range(num_replicas)).run_block(main.body, args)
