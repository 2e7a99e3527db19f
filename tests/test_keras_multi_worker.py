"""TensorFlow's "Multi-worker training with Keras" tutorial on strategax (issue 34): its
`main.py` and its `BackupAndRestore` cell with only the imports and the strategy constructor
changed (tests/workers/keras_multi_worker/main.py, on the small MNIST stand-in of its
`mnist_setup.py`), two workers on loopback with `TF_CONFIG`, `fit` with `steps_per_epoch`.
A first job trains uninterrupted, then trains a second model with `BackupAndRestore` until
worker 1 is killed (SIGKILL) in its second epoch; the job restarted with the same backup
folder resumes. Reference: Keras alone on one device, `fit` on the same global batches from the
same initial weights (TensorFlow 2.21 + Keras 3 cannot run the tutorial as written: its `fit`
reduces a tuple, which TensorFlow's MultiWorkerMirroredStrategy refuses)."""
import itertools
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402

from multi_worker_launch import Job  # noqa: E402

TUTORIAL = Path(__file__).resolve().parent / "workers" / "keras_multi_worker"
sys.path.insert(0, str(TUTORIAL))
import mnist_setup  # noqa: E402

WORKERS, PER_WORKER_BATCH, EPOCHS, STEPS = 2, 8, 3, 4  # an epoch is the stand-in's 64 rows once
KILL_AT = (1, 2)  # (epoch, batch) at which worker 1 dies: after the first epoch's backup
JOB_TIMEOUT = 300  # seconds; a job (or a survivor) that outlives it hangs


def results(job: Job, worker: int) -> dict:
    """The worker's JSON lines, by run ("plain", "backup")."""
    lines = [json.loads(line) for line in job.outs[worker].read_text().splitlines() if line.startswith("{")]
    return {r["run"]: r for r in lines}


def keras_alone(initial: list) -> dict:
    """Keras alone on one device: `fit` over the tutorial dataset's global batches (every worker
    reads every global batch; the whole batch is one step), from `initial`, each batch's logs kept."""
    model = mnist_setup.build_and_compile_cnn_model()  # outside any scope: no strategax
    model.set_weights([np.asarray(w, np.float32) for w in initial])
    batches = itertools.islice(iter(mnist_setup.mnist_dataset(PER_WORKER_BATCH * WORKERS)), EPOCHS * STEPS)
    losses: list = []
    logger = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(float(logs["loss"])))
    history = model.fit(((x, y.astype(np.int32)) for x, y in batches), epochs=EPOCHS, steps_per_epoch=STEPS,
                        callbacks=[logger], verbose=0)
    return {"losses": losses, "history": history.history, "final": model.get_weights()}


def assert_same_weights(got: list, want: list, rtol=1e-5, atol=1e-6) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=rtol, atol=atol)


def test_the_tutorial_trains_as_keras_alone_survives_a_killed_worker_and_resumes_from_its_backup(tmp_path, monkeypatch):
    # Intent: (1) the tutorial's uninterrupted fit gives the same losses and weights on both
    # workers, equal to Keras alone on one device over the same global batches (1e-5), and a
    # strategy.reduce of a tuple sums each element; (2) worker 1 killed in epoch 1 stops worker 0
    # with WorkerLostError naming it (exit 1, no hang), with BackupAndRestore's backup of epoch 0
    # written once, by the chief; (3) the job restarted with the same backup folder resumes at
    # epoch 1 on both workers and ends with the uninterrupted run's losses and weights, and
    # BackupAndRestore deletes its folder at the end. ModelCheckpoint in the first fit: the
    # chief writes one file per epoch, the other worker none where the user looks.
    backup, checkpoints, scratch = tmp_path / "backup", tmp_path / "ckpt", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the workers' temporary folders
    args = [str(EPOCHS), str(STEPS), str(backup), str(checkpoints)]
    with Job(tmp_path / "first", WORKERS, 1, ["plain,backup", *args, f"{KILL_AT[0]}:{KILL_AT[1]}"],
             script=TUTORIAL / "main.py", cwd=tmp_path) as job:
        exits = job.exit_times(timeout=JOB_TIMEOUT)
        first = [results(job, w) for w in range(WORKERS)]
        out1, err0 = job.outs[1].read_text(), job.stderr(0)
    (code0, _), (code1, _) = exits
    assert code1 == -signal.SIGKILL and "dying" in out1, job.logs()
    assert code0 == 1, job.logs()  # not None: the survivor did not hang
    assert "WorkerLostError" in err0 and f"worker 1 (worker, task index 1, {job.addresses[1]}) was lost" in err0, err0

    plain = [r["plain"] for r in first]
    want = keras_alone(plain[0]["initial"])
    for r in plain:  # both workers, as Keras alone
        assert r["epochs"] == list(range(EPOCHS))
        assert r["initial"] == plain[0]["initial"]
        np.testing.assert_allclose(r["losses"], want["losses"], rtol=1e-5)
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(r["history"][key], want["history"][key], rtol=1e-5, err_msg=key)
        assert_same_weights(r["final"], want["final"])
        assert r["reduced_tuple"] == [1.0 + 2.0, 2.0 * WORKERS]
    assert plain[1]["losses"] == plain[0]["losses"] and plain[1]["final"] == plain[0]["final"]
    # ModelCheckpoint: the chief's files, one per epoch; the last holds the final weights
    assert sorted(p.name for p in checkpoints.iterdir()) == [f"ckpt_{e}.weights.h5" for e in range(1, EPOCHS + 1)]
    last = mnist_setup.build_and_compile_cnn_model()
    last.load_weights(str(checkpoints / f"ckpt_{EPOCHS}.weights.h5"))
    assert_same_weights(last.get_weights(), plain[0]["final"], rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "ckpt", "first", "tmp"]  # nothing else written
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("strategax-workertemp")]  # deleted
    assert all("backup" not in r for r in first)  # the backed-up fit never finished
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == KILL_AT[0]
    assert sorted(p.name for p in backup.iterdir()) == ["latest.weights.h5", "training_metadata.json"]

    with Job(tmp_path / "restart", WORKERS, 1, ["backup", *args], script=TUTORIAL / "main.py", cwd=tmp_path) as job:
        assert job.wait(timeout=JOB_TIMEOUT) == [0] * WORKERS, job.logs()
        resumed = [results(job, w)["backup"] for w in range(WORKERS)]
    per_epoch = slice(KILL_AT[0] * STEPS, None)
    for r in resumed:  # from the backup of epoch 0: epochs 1 and 2, ending where the uninterrupted run ends
        assert r["epochs"] == list(range(KILL_AT[0], EPOCHS))
        np.testing.assert_allclose(r["losses"], want["losses"][per_epoch], rtol=1e-5)
        np.testing.assert_allclose(r["history"]["loss"], want["history"]["loss"][KILL_AT[0]:], rtol=1e-5)
        assert_same_weights(r["final"], want["final"])
        assert_same_weights(r["final"], plain[0]["final"], rtol=0, atol=0)
    assert resumed[1]["final"] == resumed[0]["final"]
    assert not backup.exists()  # deleted by the chief when fit ended
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("strategax-workertemp")]
