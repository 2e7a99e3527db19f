"""The report's page and data, without a browser: `strategax-dump --html` and `f.report()` write
one self-contained page (nothing fetched) whose collective table and memory table hold the
program's numbers, values are coloured by locality (sync-on-read reads too), regions fold, and
each collective names the pass that inserted it."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from conftest import run_dump
from test_dump import SCRIPT

import strategax as sx
from strategax.tools.report import render_report
from strategax.trace.inspection import build_report

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?!#)|<link\b|@import|url\(\s*["']?(?!#)|https?://""", re.IGNORECASE)


def test_dump_html_writes_a_self_contained_report(tmp_path):
    # Intent: strategax-dump --html writes report.html beside the dump: nothing in it loads
    # from elsewhere, and its table has the script's one bucket of two 16-byte tensors (4
    # replicas: 2*(N-1)/N * 32 bytes moved), each member at the script's line.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = run_dump(script, tmp_path / "dump", "--html")
    assert result.returncode == 0, result.stderr
    (folder,) = list((tmp_path / "dump").iterdir())
    page = (folder / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and not EXTERNAL.search(page), EXTERNAL.search(page)
    (row,) = re.findall(r'<tr class="collective"[^>]*>', page)
    assert 'data-bytes="32"' in row and 'data-moved="48"' in row
    assert page.count(f"{script}:8") >= 3  # the op's line beside the IR and both members' rows
    assert 'id="memory"' in page and 'id="timings"' in page and "<svg" in page


def test_report_data_colours_values_folds_loops_and_names_the_inserting_pass():
    # Intent: in a step with a loop, a user's all_reduce, a mirrored variable updated from
    # per-replica values (insert-collectives adds its all_reduce) and a sync-on-read variable
    # read in the replica: values carry their localities, the loop's lines fold as one region,
    # and each collective names where it came from; the step computes the right numbers.
    strategy = sx.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    with strategy.scope():
        w = sx.Variable(jnp.zeros(3), aggregation=sx.VariableAggregation.MEAN)
        seen = sx.Variable(jnp.zeros(3), synchronization=sx.VariableSynchronization.ON_READ,
                           aggregation=sx.VariableAggregation.SUM)

    def replica_fn(x):
        total = sx.get_replica_context().all_reduce("SUM", x)
        w.assign_add(jax.lax.fori_loop(0, 3, lambda i, a: a + x, jnp.zeros(3)))
        return total + seen.read_value()

    step = strategy.function(lambda x: strategy.run(replica_fn, args=(x,)))
    x = strategy.experimental_distribute_values_from_function(
        lambda c: jnp.full(3, c.replica_id_in_sync_group, jnp.float32))
    out = step(x)
    np.testing.assert_allclose(w.numpy(), 3 * np.mean([0, 1, 2, 3]) * np.ones(3))  # MEAN of 3*x_r
    np.testing.assert_allclose(strategy.experimental_local_results(out)[2], [6, 6, 6])

    data = build_report(step, (x,), {})
    kinds = {row.info.reason: row.inserted_by for row in data.collectives}
    assert kinds["ReplicaContext.all_reduce"] == "traced"
    assert any(by == "insert-collectives" for reason, by in kinds.items() if reason != "ReplicaContext.all_reduce")
    localities = set(data.localities.values())
    assert {"mirrored", "per_replica", "sync_on_read"} <= localities
    reads = [op for op in data.ops if op.name == "sx.var_read"]
    assert "sync_on_read" in {op.locality for op in reads}
    opens = [line for line in data.lines if line.opens]
    assert len(opens) == sum(1 for line in data.lines if line.closes) >= 1
    assert all(data.ops[line.op].name in ("jax.while", "jax.scan", "jax.cond") for line in opens)
    page = render_report(data)
    assert page.count('<details class="region"') == len(opens) and not EXTERNAL.search(page)
    assert all(f'id="coll-{k}"' in page for k in range(len(data.collectives)))
    m = data.memory
    assert (m.variables, m.optimizer_slots) == (2 * 3 * 4, 0)  # w and seen, f32[3] each, no optimizer
