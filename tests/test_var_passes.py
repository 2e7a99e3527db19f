"""insert-collectives and check-locality on IR text: the cases in tests/passes/*.sxir, run by a
small reader of their `// RUN:` / `// CHECK:` / `// CHECK-NOT:` / `// EXPECT-ERROR:` lines, plus
the end-to-end count of collectives in a traced program."""
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from strategax.passes import PassManager, get_pass

CASES_DIR = pathlib.Path(__file__).parent / "passes"


def load_cases(filename):
    cases = []
    for chunk in (CASES_DIR / filename).read_text().split("\n// -----\n"):
        lines = chunk.splitlines()
        name = next(line.split(":")[1].strip() for line in lines if line.startswith("// CASE:"))
        passes = next(line.split("-p", 1)[1].strip() for line in lines if line.startswith("// RUN:"))
        body = "\n".join(line for line in lines if not line.startswith("//"))
        checks = [(line.split(":", 1)[0][3:], line.split(":", 1)[1].strip()) for line in lines
                  if line.startswith(("// CHECK", "// EXPECT-ERROR"))]
        cases.append(pytest.param(body, passes.split(","), checks, id=name))
    return cases


def run_case(body, passes, checks):
    module = sx.ir.parse(body)
    manager = PassManager([get_pass(p) for p in passes], verify_each=True)
    errors = [text for kind, text in checks if kind == "EXPECT-ERROR"]
    if errors:
        with pytest.raises(Exception) as err:
            manager.run(module)
        assert errors[0] in str(err.value), str(err.value)
        return
    out = sx.ir.print_module(manager.run(module)).splitlines()
    pos, forbidden = 0, []
    for kind, text in checks:
        if kind == "CHECK-NOT":
            forbidden.append(text)
            continue
        found = next((i for i in range(pos, len(out)) if text in out[i]), None)
        assert found is not None, f"CHECK {text!r} not found after line {pos}:\n" + "\n".join(out)
        for line in out[pos:found]:
            assert not any(f in line for f in forbidden), f"CHECK-NOT {forbidden} matched {line!r}"
        pos, forbidden = found + 1, []
    for line in out[pos:]:
        assert not any(f in line for f in forbidden), f"CHECK-NOT {forbidden} matched {line!r}"


@pytest.mark.parametrize("body, passes, checks", load_cases("insert_collectives.sxir"))
def test_insert_collectives(body, passes, checks):
    run_case(body, passes, checks)


@pytest.mark.parametrize("body, passes, checks", load_cases("check_locality.sxir"))
def test_check_locality(body, passes, checks):
    run_case(body, passes, checks)


def test_one_all_reduce_per_aggregated_update_in_a_traced_step():
    # Intent: "Done when": exactly one all_reduce per aggregated update, with reason and this
    # file's line; sync-on-read updates in replica context show none.
    st = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    with st.scope():
        a = sx.Variable(jnp.zeros(3), aggregation="SUM")
        b = sx.Variable(jnp.zeros(()), aggregation="MEAN")
        acc = sx.Variable(0.0, synchronization="ON_READ", aggregation="SUM")

    @st.function
    def step(x):
        def fn(x):
            a.assign_add(x)
            b.assign(jnp.sum(x))
            acc.assign_add(jnp.sum(x))
        st.run(fn, args=(x,))

    x = st.experimental_distribute_values_from_function(
        lambda ctx: jnp.full(3, ctx.replica_id_in_sync_group + 1.0))
    text = step.ir(x)
    reduces = [line for line in text.splitlines() if "sx.all_reduce" in line]
    assert len(reduces) == 2, text
    assert all("aggregation of an update" in line and "test_var_passes.py\":" in line for line in reduces)
    traced = step.ir(x, stage="traced")
    assert "sx.all_reduce" not in traced
    step(x)
    assert np.asarray(a.values[0]).tolist() == [10.0] * 3  # 1+2+3+4
    assert float(b.values[0]) == 7.5  # mean of 3, 6, 9, 12
    assert [float(c) for c in acc.values] == [3.0, 6.0, 9.0, 12.0]
