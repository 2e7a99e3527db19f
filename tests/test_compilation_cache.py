"""JAX's persistent compilation cache for strategax programs (backends/compile_cache.py): a
second process loads the program the first compiled (JAX's log says which programs it
compiled and which it found), and a folder that cannot be used, a full disk or damaged entries
warn and the step still gives plain JAX's numbers. Each case runs in fresh processes (the cache
is set up once per process) with its own folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

SCRIPT = r"""
import json, logging, sys, warnings
import numpy as np, jax, jax.numpy as jnp
import strategax as sx

counts = {"found": 0, "compiled": 0}

class Count(logging.Handler):  # JAX's log of each program its persistent cache looked up
    def emit(self, record):
        text = record.getMessage()
        if "'jit_step'" in text and text.startswith("Persistent compilation cache hit"):
            counts["found"] += 1
        elif "'jit_step'" in text and text.startswith("PERSISTENT COMPILATION CACHE MISS"):
            counts["compiled"] += 1

log = logging.getLogger("jax._src.compiler")
log.setLevel(logging.DEBUG)
log.addHandler(Count())
if sys.argv[1] == "full":  # every write fails as on a full disk
    import errno
    from jax._src import lru_cache
    def put(self, key, value):
        raise OSError(errno.ENOSPC, "No space left on device")
    lru_cache.LRUCache.put = put

strategy = sx.MirroredStrategy()
x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3) / 10

@strategy.function
def step(w, pieces):
    def replica(w, xb):
        g = jax.grad(lambda w: jnp.sum(jnp.tanh(xb @ w) ** 2))(w)
        return w - 0.1 * sx.get_replica_context().all_reduce("SUM", g)
    return strategy.run(replica, args=(w, pieces))

pieces = strategy.experimental_distribute_values_from_function(lambda c: x[c.replica_id_in_sync_group:][:1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    w = step(jnp.array([1.0, -0.5, 0.25]), pieces)
print(json.dumps({"w": np.asarray(w.values[0]).tolist(), **counts, "dir": jax.config.jax_compilation_cache_dir,
                  "warnings": [str(c.message) for c in caught]}))
"""


def run(tmp_path: Path, setting: str | None, mode: str = "plain") -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), JAX_PLATFORMS="cpu")
    env.pop("STRATEGAX_COMPILATION_CACHE", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "home-cache")  # the default folder, if one is made
    if setting is not None:
        env["STRATEGAX_COMPILATION_CACHE"] = setting
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def expected() -> np.ndarray:
    """The step on one device in plain JAX: the gradient summed over all 8 rows."""
    x = jnp.arange(8 * 3, dtype=jnp.float32).reshape(8, 3) / 10
    w = jnp.array([1.0, -0.5, 0.25])
    return np.asarray(w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w))


def entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("jit_step-*-cache"))


def test_a_second_process_loads_the_program_the_first_compiled(tmp_path):
    # Intent: the first process compiles the step and writes it; the second compiles no
    # strategax program (JAX's log: found, not compiled); both give plain JAX's numbers.
    folder = tmp_path / "cache"
    first = run(tmp_path, str(folder))
    assert first["dir"] == str(folder) and first["compiled"] == 1 and first["found"] == 0
    assert len(entries(folder)) == 1
    second = run(tmp_path, str(folder))
    assert second["compiled"] == 0 and second["found"] == 1, second
    for out in (first, second):
        np.testing.assert_allclose(out["w"], expected(), rtol=1e-6)
        assert out["warnings"] == []


def test_the_default_folder_is_the_users_and_zero_turns_the_cache_off(tmp_path):
    # Intent: unset, the cache lives in $XDG_CACHE_HOME/strategax/xla, made private to the
    # user; STRATEGAX_COMPILATION_CACHE=0 writes nothing anywhere; numbers as plain JAX.
    on = run(tmp_path, None)
    default = tmp_path / "home-cache" / "strategax" / "xla"
    assert on["dir"] == str(default) and len(entries(default)) == 1
    assert default.stat().st_mode & 0o077 == 0
    off = run(tmp_path / "off", "0")
    assert off["dir"] is None and not (tmp_path / "off").exists()  # no folder made, nothing written
    for out in (on, off):
        np.testing.assert_allclose(out["w"], expected(), rtol=1e-6)


def test_a_folder_that_cannot_be_made_warns_and_the_step_runs(tmp_path):
    # Intent: the folder lies under a file (no user, root included, can make it): one warning
    # names the folder and the fix, the cache stays off, and the step gives plain JAX's numbers.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = run(tmp_path, str(blocker / "cache"))
    assert out["dir"] is None
    (warning,) = out["warnings"]
    assert str(blocker / "cache") in warning and "STRATEGAX_COMPILATION_CACHE" in warning
    np.testing.assert_allclose(out["w"], expected(), rtol=1e-6)


def test_a_full_disk_and_damaged_entries_warn_and_the_step_runs(tmp_path):
    # Intent: a write that fails (no space left) is a warning, not an error; an entry cut short
    # (a process killed while writing it) is a warning and a fresh compilation; the numbers
    # stay plain JAX's.
    folder = tmp_path / "cache"
    full = run(tmp_path, str(folder), mode="full")
    assert any("No space left" in w for w in full["warnings"]) and entries(folder) == []
    run(tmp_path, str(folder))
    for entry in entries(folder):
        entry.write_bytes(entry.read_bytes()[:100])
    damaged = run(tmp_path, str(folder))
    assert damaged["compiled"] == 1 and damaged["found"] == 0
    assert any("Error reading persistent compilation cache entry" in w for w in damaged["warnings"])
    for out in (full, damaged):
        np.testing.assert_allclose(out["w"], expected(), rtol=1e-6)
