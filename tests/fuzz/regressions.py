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
    # two SUM all_reduces of different values in one bucket (fuse-collectives): each member
    # must get its own result back
    Program(n=3, inputs="per_replica", rows=(), steps=(("all_reduce_sum", 0, 0), ("replica_scale", 0, 0),
                                                       ("all_reduce_sum", 3, 0), ("sub", 2, 4))),
    # the long run's first find (not a strategax bug): with bf16 compression, a difference of
    # large compressed sums keeps their rounding error; the tolerance now scales with the
    # largest value the program computes
    Program(n=4, inputs="per_replica", rows=(), steps=(("while", -2, -2), ("batch_reduce_sum", 0, 15), ("cond", -1, 6),
                                                       ("slice", 0, 2), ("merge_reduce_sum", 13, -1), ("neg", 9, -1),
                                                       ("all_reduce_sum", 12, -1)),
            compression="bf16", seed=3),
    # a partial batch's padded rows (1.0 after x * 0.5 + 1) never count: summed over the rows,
    # and averaged over all entries
    Program(n=4, inputs="dataset", rows=(10,), steps=(("sum0", 1, 0),)),
    Program(n=4, inputs="dataset", rows=(10,), steps=(("mean_all", 1, 0),)),
    # the summed gather alone (the other one dead): an all_reduce SUM of the local sums
    Program(n=2, inputs="per_replica", rows=(), steps=(("all_gather", 0, 0), ("all_gather", 0, 0), ("sum0", 2, 0),
                                                       ("add", 4, 3))),
    # the fourth long run (docs/testing.md): the reference took a value TensorFlow cannot compute
    # (an all_reduce / batch_reduce_to of values whose shapes differ) to have its operand's traced
    # shape, so a later binary step read it where strategax (rightly) read another value: the
    # fuzzer's bug, not strategax's; the reference now traces such a value's shape as the step's
    Program(n=2, inputs="wide", rows=(1, 2), steps=(("all_reduce_sum", -2, -1), ("sum0", -2, -2), ("max", 4, -2),
                                                    ("flatten", -1, 14), ("max", 0, -1)), seed=1),
    Program(n=2, inputs="ragged", rows=(2, 3), steps=(("batch_reduce_sum", 5, -1), ("slice", 2, -1),
                                                      ("all_reduce_mean", 9, -1), ("add", 1, -2),
                                                      ("merge_reduce_mean", 14, 9), ("tanh", -2, 13)),
            seed=1, post="reduce_mean0"),
    # the fourth long run, second generator: on one replica a partial batch is not padded (traced
    # as its own 1 row), where the reference assumed 2 rows and so read another operand than
    # strategax (rightly) did: the fuzzer's bug
    Program(n=1, inputs="dataset", rows=(3,), steps=(("sum0", 1, 7), ("flatten", 0, 8), ("sub", -2, -1)),
            post="reduce_mean0"),
    # not a find: simplify-collectives' transpose sinking pinned (the transpose fuzz kinds):
    # a 3-D dot's two transposes composed into one below the MEAN all_reduce, two that cancel
    Program(n=4, inputs="per_replica", rows=(), steps=(("stack_last", 0, 0), ("all_reduce_dot_moved", 2, 0),
                                                       ("all_reduce_twice", 3, 0), ("add", 4, 3))),
]

# Programs where TensorFlow raises and strategax must raise a named error too (check(p) ==
# "both raise"), not answer
RAISING: list[Program] = [
    # the fourth long run: a dot whose matrix has the traced (padded) width, contracting a
    # partial batch's rows (after a sum over the features); strategax contracted the padding and
    # answered (a vector of the padded length) where TensorFlow's matmul raises on a replica with
    # fewer rows: now a padding gap (passes/mask_padding/fixed_extents.py)
    Program(n=5, inputs="dataset", rows=(15,), steps=(("sum_last", 3, -2), ("dot", -1, -2), ("sum0", -1, 10)),
            post="reduce_mean"),
    # the same along per-replica widths that differ (docs/testing.md's open question)
    Program(n=2, inputs="wide", rows=(3, 1), steps=(("dot", 0, 0),)),
    # the fourth long run, second generator: a variable read (3 entries) added to row sums of 3,
    # 3 and 2 entries: TensorFlow raises on the third replica; the reference raised NumPy's
    # broadcast error (the fuzzer's bug); strategax raises a padding gap (a fixed-size variable
    # along a padded axis)
    Program(n=3, inputs="ragged", rows=(3, 3, 2), steps=(("sum_last", 9, 7), ("var_update", 4, -1), ("add", -1, 10)),
            var=("on_read", "mean", "assign_sub")),
]

# Compressed programs where rounding to bfloat16 alone moves the answer past any fair tolerance
# (ill-conditioned: the sine of a large rounded sum): compared by shape only
# (check(p) == "ok (bf16: shapes only)"). The fourth long run's one bf16 failure: a jax.grad of
# sin(v) * v at v in the hundreds, after compressed reductions, was 30% off (it is exact
# without compression)
ILL_CONDITIONED: list[Program] = [
    Program(n=5, inputs="per_replica", rows=(), steps=(("batch_reduce_mean", -1, -1), ("grad_all_reduce", -1, -2),
                                                       ("all_reduce_sum", -1, -1), ("square", 11, -1),
                                                       ("max", -1, -1), ("var_update", 2, 15), ("take", 7, 9),
                                                       ("grad", 4, -1)),
            var=("on_read", "only_first_replica", "assign_sub"), bytes_per_pack=1 << 20, compression="bf16", seed=3,
            post="reduce_mean"),
]
