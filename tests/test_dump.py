"""strategax-dump and STRATEGAX_DUMP_TO: every compiled function leaves its stages, programs,
summary and graph behind, and they agree with what ran."""
from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import strategax as sx
from strategax.tools import strategax_dump

from conftest import here, run_dump

SCRIPT = '''
import numpy as np
import strategax as sx

strategy = sx.MirroredStrategy()

def replica_fn(x):
    return sx.get_replica_context().all_reduce("SUM", [x, x * 2.0])

step = strategy.function(lambda x: strategy.run(replica_fn, args=(x,)))
x = strategy.experimental_distribute_values_from_function(
    lambda c: np.full((4,), c.replica_id_in_sync_group, np.float32))
print(float(np.asarray(step(x)[1].values[0])[0]))
'''


def test_strategax_dump_runs_a_script_and_writes_every_stage(tmp_path):
    # Intent: the console tool runs SCRIPT with its args and writes one folder per compiled
    # function: each stage's IR (parseable), StableHLO, HLO, summary with the script's line, DOT.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "dump"
    result = run_dump(script, out)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.strip()) == 2.0 * sum(range(4))  # the script ran: 2 * (0+1+2+3)
    (folder,) = list(out.iterdir())
    names = sorted(p.name for p in folder.iterdir())
    assert names[0] == "00_traced.sxir" and any(n.endswith("_fuse-collectives.sxir") for n in names)
    for stage in folder.glob("*.sxir"):
        sx.ir.verify(sx.ir.parse(stage.read_text(), str(stage)))
    # small members: one flat all_reduce on CPU too (dialects/bucket.py)
    assert (folder / "lowered.stablehlo.mlir").read_text().count("stablehlo.all_reduce") == 1
    assert "all-reduce" in (folder / "compiled.hlo.txt").read_text()
    summary = (folder / "summary.txt").read_text()
    assert f"{script}:8" in summary  # the all_reduce's line in the user's script
    assert "1 collective(s), 48 bytes moved per replica per step (4 replicas)" in summary  # 2*32*3/4
    assert "XLA compile" in summary and "pass fuse-collectives" in summary
    dot = (folder / "graph.dot").read_text()
    assert dot.startswith('digraph "_lambda_"') and "sx.all_reduce_bucket" in dot


def test_env_var_dumps_from_any_program(tmp_path, monkeypatch):
    # Intent: STRATEGAX_DUMP_TO alone (no tool) writes the dump; the graph has one node per op.
    monkeypatch.setenv("STRATEGAX_DUMP_TO", str(tmp_path))
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync

    @strategy.function
    def step(x):
        return strategy.reduce("MEAN", strategy.run(lambda v: v * v, args=(x,)), axis=None)

    x = strategy.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group))
    result = step(x)
    np.testing.assert_allclose(float(result), np.mean(np.arange(n, dtype=np.float32) ** 2))
    (folder,) = [p for p in tmp_path.iterdir() if p.name.endswith("_step")]
    final = sx.ir.parse((folder / "final.sxir").read_text())
    assert (folder / "final.sxir").read_text() == step.ir(x)
    dot = (folder / "graph.dot").read_text()
    nodes = [line for line in dot.splitlines() if line.startswith("  op") and "->" not in line]
    assert len(nodes) == len(final.main.body.ops)
    assert "Strategy.reduce" in (folder / "summary.txt").read_text()


@pytest.mark.parametrize("how", ["path-is-a-file", "disk-full"])
def test_unwritable_dump_warns_once_and_the_program_runs(tmp_path, monkeypatch, how):
    # Intent: a dump that cannot be written (STRATEGAX_DUMP_TO naming a file; a full disk) is one
    # warning naming the user's line and a fix, never an error out of f(...): every call, a new
    # signature included, returns the right numbers.
    target = tmp_path / "dump"
    if how == "path-is-a-file":
        target.write_text("not a folder")
    else:
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(Path, "write_text", full)
    monkeypatch.setenv("STRATEGAX_DUMP_TO", str(target))
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    step = strategy.function(lambda x: strategy.reduce("SUM", strategy.run(lambda v: v * 2.0, args=(x,)), axis=None))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = here() + 1
        results = [step(np.float32(3.0)), step(np.float32(3.0)), step(np.ones((2,), np.float32))]
    np.testing.assert_allclose(np.asarray(results[0]), 2.0 * 3.0 * n)
    np.testing.assert_allclose(np.asarray(results[1]), 2.0 * 3.0 * n)
    np.testing.assert_allclose(np.asarray(results[2]), np.full((2,), 2.0 * n))
    dump_warnings = [w for w in caught if "STRATEGAX_DUMP_TO" in str(w.message)]
    assert len(dump_warnings) == 1, [str(w.message) for w in caught]
    (w,) = dump_warnings
    assert (os.path.basename(w.filename), w.lineno) == ("test_dump.py", line)
    assert "fix:" in str(w.message)


def test_strategax_dump_out_naming_a_file_exits_1_with_a_message(tmp_path, capsys):
    # Intent: `strategax-dump --out FILE script.py` says why and exits 1 before running the script.
    not_a_folder = tmp_path / "out.txt"
    not_a_folder.write_text("")
    script = tmp_path / "train.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    assert strategax_dump.main(["--out", str(not_a_folder), str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"strategax-dump: error: --out {not_a_folder} ") and "Traceback" not in err
    assert not (tmp_path / "ran").exists()
