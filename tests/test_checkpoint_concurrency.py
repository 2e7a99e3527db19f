"""Nothing is ever lost or mixed: saves from concurrent processes and threads into one
directory each get their own checkpoint holding their own values, and a saver killed with
SIGKILL mid-save leaves the previous checkpoint restorable and its temporary claim to be removed
by the next save."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp

import strategax as sx

ROOT = Path(__file__).resolve().parent.parent
SAVER = Path(__file__).resolve().parent / "workers" / "ckpt_saver.py"


def start_saver(directory, writer: int, count: int, size: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, str(SAVER), str(directory), str(writer), str(count), str(size)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))


def stored_value(path) -> np.ndarray:
    """What orbax alone reads from a checkpoint of `v`."""
    return np.asarray(ocp.StandardCheckpointer().restore(path)["v"])


def leftovers(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def test_concurrent_process_saves_never_share_a_checkpoint(tmp_path):
    # Intent: three processes saving four times each into one directory get twelve distinct
    # checkpoints, each holding the values of the save that returned its path.
    procs = [start_saver(tmp_path, w, 4, 1000) for w in (1, 2, 3)]
    saved = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        saved += [line.split()[1:] for line in out.splitlines() if line.startswith("saved ")]
    assert len(saved) == 12 and len({path for path, _ in saved}) == 12
    for path, value in saved:
        np.testing.assert_array_equal(stored_value(path), np.full(1000, float(value), np.float32))
    assert sorted(os.listdir(tmp_path)) == sorted(f"ckpt-{n}" for n in range(1, 13))


def test_concurrent_thread_saves_never_share_a_checkpoint(tmp_path):
    # Intent: four threads, each with its own variable and Checkpoint, saving five times into
    # one directory: twenty distinct paths, each holding its own thread's values.
    saved, errors = [], []

    def saver(writer):
        try:
            v = sx.Variable(np.zeros(500, np.float32))
            ckpt = sx.Checkpoint(v=v)
            for i in range(5):
                v.assign(np.full(500, writer * 1000 + i, np.float32))
                saved.append((ckpt.save(str(tmp_path)), writer * 1000 + i))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=saver, args=(w,)) for w in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(saved) == 20 and len({p for p, _ in saved}) == 20
    for path, value in saved:
        np.testing.assert_array_equal(stored_value(path), np.full(500, value, np.float32))


def test_sigkill_mid_save_keeps_the_previous_checkpoint_and_the_next_save_cleans_up(tmp_path):
    # Intent: savers killed with SIGKILL inside a save (three of them, each in its own
    # directory, killed at different moments after a save has claimed its number) always
    # leave a latest checkpoint that restores, holding a value at least as new as the last
    # save that returned; the next save removes every temporary folder the killed saver left.
    size = 1 << 20  # 4 MiB: a save lasts long enough to be killed inside
    dirs = [tmp_path / f"run{i}" for i in range(3)]
    procs = [start_saver(f"{d}{os.sep}", 1, 0, size) for d in dirs]  # a new directory: ends in a separator
    left_behind = []
    for delay, d, p in zip((0.0, 0.02, 0.05), dirs, procs):
        line = p.stdout.readline()
        assert line.startswith("saved "), p.stderr.read()[-3000:]
        deadline = time.monotonic() + 60
        while not leftovers(d) and time.monotonic() < deadline:  # the next save has claimed N
            time.sleep(0.001)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        rest, _ = p.communicate(timeout=30)
        last = max(float(x.split()[2]) for x in [line, *rest.splitlines()] if x.startswith("saved "))
        left_behind.append(leftovers(d))

        latest = sx.latest_checkpoint(str(d))
        v = sx.Variable(np.zeros(size, np.float32))
        sx.Checkpoint(v=v).restore(latest).assert_consumed()
        value = v.numpy()
        assert value[0] >= last and (value == value[0]).all()

        sx.Checkpoint(v=v).save(str(d))
        assert leftovers(d) == []
    assert any(left_behind), left_behind  # the kills did land inside saves
