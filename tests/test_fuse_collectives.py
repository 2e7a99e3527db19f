"""fuse-collectives end to end: 40 gradient tensors all-reduced with CommunicationOptions pack
into the buckets API.md's rule gives, visible in the IR, the lowered StableHLO and stats, and
the numbers equal plain one-device JAX."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from strategax.passes.fuse_collectives import DEFAULT_BYTES_PER_PACK

N_PARAMS, SHAPE = 40, (4, 8)  # 40 tensors of 128 bytes each: 5120 bytes in all
TENSOR_BYTES = int(np.prod(SHAPE)) * 4


def loss_fn(params, x):
    return sum(jnp.mean(jnp.tanh(x @ params[i]) * (i + 1)) for i in range(N_PARAMS))


reference_grad = jax.jit(jax.grad(loss_fn))  # plain JAX on one device (eagerly, 40 terms take seconds)


def make_params():
    keys = jax.random.split(jax.random.PRNGKey(0), N_PARAMS)
    return [jax.random.normal(k, SHAPE) * 0.3 for k in keys]


def count_in_ir(text: str) -> int:
    return sum(1 for line in text.splitlines() if " sx.all_reduce" in line)


@pytest.mark.parametrize("bytes_per_pack", [0, 100, 3 * TENSOR_BYTES, 8 * TENSOR_BYTES])
def test_forty_gradients_pack_into_ceil_total_over_bytes_per_pack_buckets(bytes_per_pack):
    # Intent: the Done-when line of issue 5, checked in the IR, in StableHLO and in stats.
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    options = sx.CommunicationOptions(bytes_per_pack=bytes_per_pack)

    def replica_step(params, x):
        grads = jax.grad(loss_fn)(params, x)
        return sx.get_replica_context().all_reduce("SUM", grads, options=options)

    step = strategy.function(lambda params, x: strategy.run(replica_step, args=(params, x)))
    params = make_params()
    x = np.random.RandomState(1).normal(size=(n * 2, SHAPE[0])).astype(np.float32)
    dist_x = strategy.experimental_distribute_values_from_function(lambda ctx: x[2 * ctx.replica_id_in_sync_group:][:2])
    grads = step(params, dist_x)

    total = N_PARAMS * TENSOR_BYTES
    limit = bytes_per_pack or DEFAULT_BYTES_PER_PACK  # 0: strategax's default (TensorFlow's "automatic")
    expected = math.ceil(total / max(limit, TENSOR_BYTES))
    if limit < TENSOR_BYTES:
        expected = N_PARAMS  # each tensor is larger than a pack: a bucket of its own
    assert count_in_ir(step.ir(params, dist_x)) == expected
    assert count_in_ir(step.ir(params, dist_x, stage="cse")) == N_PARAMS  # before fusion: one per tensor
    # one flat collective per bucket on every backend: the members are small (on CPU larger
    # ones would be reduced alone, see the per-backend test below)
    exported = step.export(params, dist_x, platforms=("tpu", "cuda")).mlir_module()
    assert exported.count("stablehlo.all_reduce") == expected
    assert step.stablehlo(params, dist_x).count("stablehlo.all_reduce") == expected
    stats = step.stats(params, dist_x)
    assert stats.count == expected
    assert sum(max(len(c.members), 1) for c in stats.collectives) == N_PARAMS
    assert sum(c.payload_bytes for c in stats.collectives) == total
    assert stats.bytes_per_replica == sum(2 * c.payload_bytes * (n - 1) // n for c in stats.collectives)

    # Plain JAX on one device: the sum over replicas of each replica's gradient.
    reference = [sum(g) for g in zip(*[reference_grad(params, x[2 * r:2 * r + 2]) for r in range(n)])]
    for got, want in zip(grads, reference):
        for component in got.values:
            np.testing.assert_allclose(np.asarray(component), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_default_is_one_bucket_per_reduce_op():
    # Intent: without options, sum and mean reductions of small tensors (far below the default
    # bucket size) each become one bucket (two collectives).
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync

    def replica_step(x):
        ctx = sx.get_replica_context()
        sums = ctx.all_reduce("SUM", [x * k for k in range(1, 6)])
        means = ctx.all_reduce("MEAN", [x + k for k in range(3)])
        return sums, means

    step = strategy.function(lambda x: strategy.run(replica_step, args=(x,)))
    pieces = [np.full((3,), r, np.float32) for r in range(n)]
    x = strategy.experimental_distribute_values_from_function(lambda ctx: pieces[ctx.replica_id_in_sync_group])
    sums, means = step(x)
    assert step.stats(x).count == 2
    assert step.export(x, platforms="tpu").mlir_module().count("stablehlo.all_reduce") == 2
    assert step.stablehlo(x).count("stablehlo.all_reduce") == 2  # CPU too: small members are packed
    total = sum(pieces)
    for k, s in enumerate(sums, start=1):
        np.testing.assert_allclose(np.asarray(s.values[0]), k * total)
    for k, m in enumerate(means):
        np.testing.assert_allclose(np.asarray(m.values[-1]), total / n + k)


def test_default_buckets_keep_tensors_above_64_kib_alone_and_zero_means_the_default():
    # Intent: the default bucket size (64 KiB, chosen by measurement: docs/performance.md) packs
    # the small tensors in program order and reduces each larger one on its own, as jax.jit's
    # per-tensor pmean does; bytes_per_pack=0 (TensorFlow's "automatic") is that default; the
    # numbers are one-device NumPy's.
    assert DEFAULT_BYTES_PER_PACK == 64 * 1024
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    big = (128, 160)  # 80 KiB of float32: above the default

    def make_step(options):
        def replica_step(x):
            grads = [x[0, 0] * jnp.ones((4,)), x[:4] + 1.0, x * 2.0, x - 1.0]  # 16 B, 2.5 KiB, 80 KiB, 80 KiB
            return sx.get_replica_context().all_reduce("SUM", grads, options=options)
        return strategy.function(lambda x: strategy.run(replica_step, args=(x,)))

    pieces = [np.full(big, r + 0.5, np.float32) for r in range(n)]
    x = strategy.experimental_distribute_values_from_function(lambda ctx: pieces[ctx.replica_id_in_sync_group])
    total = sum(pieces)
    for options in (None, sx.CommunicationOptions(bytes_per_pack=0)):
        step = make_step(options)
        out = step(x)
        stats = step.stats(x)
        # the two small ones share a bucket; each 80 KiB tensor is reduced alone
        assert sorted(max(len(c.members), 1) for c in stats.collectives) == [1, 1, 2]
        assert sorted(c.payload_bytes for c in stats.collectives) == [16 + 2560, 81920, 81920]
        for got, want in zip(out, [total[0, 0] * np.ones(4), total[:4] + n, total * 2.0, total - n]):
            np.testing.assert_allclose(np.asarray(got.values[0]), want, rtol=1e-6)


def test_bucket_lowering_per_backend_keeps_numbers_and_the_bucket_table():
    # Intent: a bucket lowers per backend (TPU and GPU: one flat all_reduce; CPU: the members of
    # at most 64 KiB flat, a larger one alone, which XLA:CPU combines into one all-reduce)
    # while the IR and stats keep the one bucket with its table, and the numbers are
    # one-device NumPy's.
    from strategax.dialects.bucket import CPU_PACK_BYTES
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync

    def replica_step(a, b, c):
        one_buffer = sx.CommunicationOptions(bytes_per_pack=1 << 30)  # every member in one bucket
        return sx.get_replica_context().all_reduce("MEAN", [a, b * 2.0, a * b, c], options=one_buffer)

    step = strategy.function(lambda a, b, c: strategy.run(replica_step, args=(a, b, c)))
    pa = [np.arange(4, dtype=np.float32) + r for r in range(n)]
    pb = [np.full((2, 4), r + 1.0, np.float32) for r in range(n)]
    pc = [np.full((128, 160), r - 2.0, np.float32) for r in range(n)]
    assert pc[0].nbytes > CPU_PACK_BYTES >= pb[0].nbytes
    a, b, c = (strategy.experimental_distribute_values_from_function(lambda ctx, p=p: p[ctx.replica_id_in_sync_group])
               for p in (pa, pb, pc))
    out = step(a, b, c)
    stats = step.stats(a, b, c)
    assert stats.count == 1 and len(stats.collectives[0].members) == 4
    assert "sx.all_reduce_bucket" in step.ir(a, b, c)
    cpu = step.stablehlo(a, b, c)
    assert cpu.count("stablehlo.all_reduce") == 2 and cpu.count("stablehlo.concatenate") == 1
    assert step.hlo(a, b, c).count(" all-reduce(") == 1
    for platform in ("tpu", "cuda"):
        text = step.export(a, b, c, platforms=platform).mlir_module()
        assert text.count("stablehlo.all_reduce") == 1 and "stablehlo.concatenate" in text
    want = [np.mean(pa, 0), np.mean([p * 2.0 for p in pb], 0), np.mean([x * y for x, y in zip(pa, pb)], 0),
            np.mean(pc, 0)]
    for got, w in zip(out, want):
        for component in got.values:
            np.testing.assert_allclose(np.asarray(component), w, rtol=1e-6)
