"""`StrategyFunction.export(..., platforms=...)` and `strategax-dump --platforms`: the program
lowered for TPU and GPU on a CPU-only machine holds exactly the IR's collectives, serializes,
and (exported for CPU) computes one-device NumPy's numbers."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import export

import strategax as sx
from conftest import run_dump
from strategax.ir import is_collective

N = 8
# the StableHLO ops a collective lowers to (all_reduce also carries broadcasts and buckets)
HLO_COLLECTIVE = re.compile(r'"?stablehlo\.(all_reduce|all_gather|reduce_scatter|all_to_all|'
                            r'collective_permute|collective_broadcast)"?[ (]')


def ir_collectives(step, *args) -> int:
    module = step._specialization(args, {})[0].module
    return sum(1 for f in module.funcs for op in f.body.walk() if is_collective(op))


def hlo_collectives(text: str) -> int:
    """The collectives of one platform's program in `text`. A module exported for several
    platforms selects platform-specific lowerings (JAX lowers all_gather per platform) with a
    `stablehlo.case` on an index computed by another case from the platform argument: only
    the first branch of such a case is counted, as only one of them runs."""
    case_results: set[str] = set()
    stack: list[list] = []  # open cases: [depth inside it, is a platform selection, branch]
    depth, count = 0, 0
    for line in text.splitlines():
        stripped = line.strip()
        case = re.match(r'(%[\w#]+)(?::\d+)? = "stablehlo\.case"\((%[\w#]+)\)', stripped)
        if stack and depth == stack[-1][0] and stripped.startswith("}, {"):
            stack[-1][2] += 1
        elif HLO_COLLECTIVE.search(stripped) and all(branch == 0 for _, platform, branch in stack if platform):
            count += 1
        depth += line.count("{") - line.count("}")
        if case:
            stack.append([depth, case.group(2) in case_results, 0])
            case_results.add(case.group(1))
        while stack and depth < stack[-1][0]:
            stack.pop()
    return count


def per_replica(st, pieces):
    return st.experimental_distribute_values_from_function(lambda c: pieces[c.replica_id_in_sync_group])


def gather_and_reduce(st):
    def replica_fn(x):
        ctx = sx.get_replica_context()
        a, b = ctx.all_reduce("SUM", [x, x * 2.0])  # fused into one bucket
        g = ctx.all_gather(x, axis=0)
        return a + jnp.max(g), b + ctx.all_reduce("MEAN", x * 3.0)
    return st.function(lambda x: st.run(replica_fn, args=(x,)))


def test_exported_module_holds_the_irs_collectives_for_tpu_and_cuda():
    # Intent: exported for TPU, for GPU, and for both at once, the module has one StableHLO
    # collective per IR collective (bucket included), and serialize() round-trips it.
    st = sx.MirroredStrategy()
    step = gather_and_reduce(st)
    x = per_replica(st, [np.full((4,), i, np.float32) for i in range(N)])
    want = ir_collectives(step, x)
    assert want == 3, step.ir(x)  # bucket(SUM a, b), all_gather, all_reduce MEAN
    for platforms in [("tpu",), ("cuda",), ("tpu", "cuda")]:
        exp = step.export(x, platforms=platforms)
        assert isinstance(exp, export.Exported) and exp.platforms == platforms
        assert exp.nr_devices == N
        text = exp.mlir_module()
        assert hlo_collectives(text) == want, text
        assert text.count("stablehlo.all_gather") == len(platforms)  # one lowering per platform
        back = export.deserialize(exp.serialize())
        assert back.platforms == platforms and back.mlir_module() == text
        assert back.in_avals == exp.in_avals and back.out_avals == exp.out_avals


def test_exported_for_cpu_runs_to_numpys_numbers():
    # Intent: the exported artifact is the program that runs: exported for CPU, serialized,
    # deserialized and called, it gives the one-device NumPy result.
    st = sx.MirroredStrategy()
    step = gather_and_reduce(st)
    pieces = [np.arange(4, dtype=np.float32) + i for i in range(N)]
    x = per_replica(st, pieces)
    back = export.deserialize(step.export(x, platforms="cpu").serialize())
    compiled, sig = step._specialization((x,), {})
    a, m = back.call(*compiled.global_args(sig))
    total, top = np.sum(pieces, 0), np.max(np.concatenate(pieces))
    np.testing.assert_allclose(np.asarray(a), total + top)
    np.testing.assert_allclose(np.asarray(m), total * 2.0 + total * 3.0 / N, rtol=1e-6)


def test_export_of_an_optimizer_step_in_a_loop_keeps_the_loops_collectives():
    # Intent: variables (donated inputs) and collectives inside a scan export for both
    # platforms with the same collective count as the IR; the step itself still trains right.
    st = sx.MirroredStrategy()
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(3, N * 2, 3)).astype(np.float32)
    ys = rng.normal(size=(3, N * 2)).astype(np.float32)
    w0 = np.array([0.5, -0.25, 1.0], np.float32)
    tx = optax.sgd(0.1)
    with st.scope():
        w = sx.Variable(w0)
        opt = sx.Optimizer(tx)

    def loss(w, x, y):
        return jnp.sum((x @ w - y) ** 2) / (N * 2)

    def fn(x_steps, y_steps):
        def body(_, xy):
            opt.apply_gradients([(jax.grad(loss)(w.read_value(), *xy), w)])
            return None, None
        jax.lax.scan(body, None, (x_steps, y_steps))

    step = st.function(lambda x, y: st.run(fn, args=(x, y)))
    pieces = lambda a: per_replica(st, [a[:, i * 2:(i + 1) * 2] for i in range(N)])  # noqa: E731
    dx, dy = pieces(xs), pieces(ys)
    want = ir_collectives(step, dx, dy)
    assert want >= 1
    exp = step.export(dx, dy, platforms=("tpu", "cuda"))
    assert hlo_collectives(exp.mlir_module()) == want
    assert "stablehlo.while" in exp.mlir_module()
    assert export.deserialize(exp.serialize()).mlir_module() == exp.mlir_module()
    step(dx, dy)  # exporting did not disturb the variables; one real run trains as plain JAX
    params = jnp.asarray(w0)
    for t in range(3):
        params = params - 0.1 * jax.grad(loss)(params, xs[t], ys[t])
    np.testing.assert_allclose(w.numpy(), params, rtol=1e-5)


def test_export_names_a_wrong_platform():
    st = sx.MirroredStrategy()
    step = st.function(lambda x: x + 1.0)
    with pytest.raises(ValueError, match='"gpu" is "cuda" or "rocm"'):
        step.export(jnp.ones(2), platforms=("gpu",))


SCRIPT = '''
import numpy as np
import strategax as sx

strategy = sx.MirroredStrategy()
step = strategy.function(lambda x: strategy.run(
    lambda v: sx.get_replica_context().all_reduce("SUM", [v, v * 2.0]), args=(x,)))
x = strategy.experimental_distribute_values_from_function(
    lambda c: np.full((4,), c.replica_id_in_sync_group, np.float32))
print(float(np.asarray(step(x)[1].values[0])[0]))
'''


def test_strategax_dump_platforms_writes_each_platforms_module(tmp_path):
    # Intent: `--platforms tpu,cuda` adds, per compiled function, the exported module and its
    # serialized Exported for each platform, each with the IR's one (bucketed) all_reduce.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "dump"
    result = run_dump(script, out, "--platforms", "tpu,cuda")
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip()) == 2.0 * sum(range(4))
    (folder,) = list(out.iterdir())
    for platform in ("tpu", "cuda"):
        text = (folder / f"exported.{platform}.stablehlo.mlir").read_text()
        assert hlo_collectives(text) == 1 and "mhlo.num_partitions = 4" in text
        back = export.deserialize(bytearray((folder / f"exported.{platform}.bin").read_bytes()))
        assert back.platforms == (platform,) and back.mlir_module() == text
    assert "export for tpu" in (folder / "summary.txt").read_text()


def test_strategax_dump_rejects_an_unknown_platform(tmp_path, capsys):
    from strategax.tools import strategax_dump
    assert strategax_dump.main(["--out", str(tmp_path), "--platforms", "tpu,gpu", "x.py"]) == 1
    assert "gpu" in capsys.readouterr().err
