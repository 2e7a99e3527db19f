"""Programs the fuzzer found wrong (issue 35, tools/fuzz.py), shrunk, kept as they were printed
(`Program(...)`): tests/fuzz/test_fuzz.py checks each one every run."""
from .programs import Program

REGRESSIONS: list[Program] = [
    # issue 35: a MEAN variable updated, its value read back, scaled per replica and reduced
    # twice: fuse-collectives bucketed the update's aggregation with those reductions (a cycle)
    Program(n=4, inputs="per_replica", rows=(), steps=(("var_update", 0, 0), ("replica_scale", 2, 0),
                                                       ("all_reduce_mean", 3, 0), ("all_reduce_mean", 3, 0),
                                                       ("add", 4, 5), ("all_reduce_mean", 6, 0)),
            var=("on_write", "mean", "assign_add")),
    # issue 35: two all_gathers of one value, the first summed, the second used otherwise:
    # simplify-collectives merged them, then erased the first as if summing were its only use
    Program(n=2, inputs="per_replica", rows=(), steps=(("all_gather", 0, 0), ("all_gather", 0, 0), ("sum0", 2, 0),
                                                       ("dot", 3, 0), ("sum0", 5, 0), ("add", 4, 6))),
    # the summed gather alone (the other one dead): an all_reduce SUM of the local sums
    Program(n=2, inputs="per_replica", rows=(), steps=(("all_gather", 0, 0), ("all_gather", 0, 0), ("sum0", 2, 0),
                                                       ("add", 4, 3))),
]
