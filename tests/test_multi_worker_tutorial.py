"""TensorFlow's tutorial "Custom training loop with Keras and MultiWorkerMirroredStrategy" as its
port writes it (examples/multi_worker_custom_training.py), two workers on loopback: each worker's
shard of the data through distribute_datasets_from_function and `Dataset.shard`, `next(iterator)`
inside the compiled step, RMSprop at Keras' defaults, a flax model, and the tutorial's checkpoint
pattern (the chief's folder; temporary folders the other workers delete after each save) with a
relative path. Reference: plain JAX (flax + optax) on one device over the same global batches."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx

from multi_worker_launch import Job

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "multi_worker_custom_training.py"
sys.path.insert(0, str(EXAMPLE.parent))
from multi_worker_custom_training import build_cnn_model, load_data  # noqa: E402

SIZE, N, FILTERS, UNITS, BATCH, STEPS, EPOCHS, WORKERS = 8, 64, 2, 8, 4, 3, 3, 2
ARGS = ["--steps-per-epoch", str(STEPS), "--per-worker-batch", str(BATCH), "--size", str(SIZE),
        "--examples", str(N), "--filters", str(FILTERS), "--units", str(UNITS), "--no-shuffle",
        "--timeout", "30", "--checkpoint-dir", "ckpt"]


def reference(epochs: int, restart: int | None = None) -> dict:
    """One device, plain JAX: each step's global batch is every worker's shard batch (worker w
    keeps elements w, w + 2, ...; batches of BATCH), the loss their mean cross entropy, Keras'
    RMSprop; every epoch starts from the first batch again (a new iterator), as the tutorial.
    `restart`: the epoch a restarted job begins with: the tutorial's checkpoint holds the model
    but not the optimizer, whose accumulators start again from zero."""
    x, y = load_data(SIZE, N)
    x, y = x / np.float32(255), y.astype(np.int32)
    model = build_cnn_model(SIZE, FILTERS, UNITS)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, SIZE, SIZE)))  # eagerly, each op compiles
    tx = optax.rmsprop(0.001, decay=0.9, eps=1e-7)
    state = tx.init(params)

    def loss_fn(p, bx, by):
        logits = model.apply(p, bx)
        return optax.softmax_cross_entropy_with_integer_labels(logits, by).mean(), logits

    @jax.jit  # one program (run eagerly, every op compiles: seconds)
    def step(params, state, bx, by):
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, bx, by)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss, logits

    history = {"loss": [], "accuracy": []}
    for epoch in range(epochs):
        if epoch == restart:
            state = tx.init(params)
        losses, correct = [], 0
        for s in range(STEPS):
            rows = np.concatenate([np.arange(w, N, WORKERS)[s * BATCH:(s + 1) * BATCH] for w in range(WORKERS)])
            params, state, loss, logits = step(params, state, x[rows], y[rows])
            losses.append(float(loss))
            correct += int((np.argmax(logits, -1) == y[rows]).sum())
        history["loss"].append(float(np.mean(losses)))
        history["accuracy"].append(correct / (STEPS * BATCH * WORKERS))
    history["params"] = params
    return history


def run_job(tmp_path: Path, name: str, epochs: int) -> list[dict]:
    with Job(tmp_path / name, WORKERS, 1, ARGS + ["--epochs", str(epochs)], script=EXAMPLE, cwd=tmp_path) as job:
        assert job.wait(timeout=150) == [0] * WORKERS, job.logs()
        return [job.result(w) for w in range(WORKERS)]


def test_the_tutorial_saves_in_its_pattern_and_resumes_after_the_last_saved_epoch(tutorial_first_run):
    # Intent: both workers call CheckpointManager.save() every epoch, each into the folder it
    # names (relative: "ckpt" and "workertemp_1/ckpt" under the working directory); the chief's
    # holds the checkpoint, worker 1 deletes its own after each save, nothing waits or hangs. The
    # first run trains epochs 0 and 1 with the reference's losses and accuracy; the second
    # restores the chief's checkpoint on both workers and trains epoch 2 only, ending with the
    # parameters of plain JAX's three epochs (RMSprop's accumulators restarted with the job:
    # the tutorial's checkpoint holds no optimizer).
    tmp_path, first = tutorial_first_run  # run_job(tmp_path, "first", 2)
    want = reference(EPOCHS, restart=2)
    manager = sx.CheckpointManager(sx.Checkpoint(x=sx.Variable(0.0)), str(tmp_path / "ckpt"))
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-2"]  # max_to_keep=1
    assert (tmp_path / "workertemp_1").is_dir() and not (tmp_path / "workertemp_1" / "ckpt").exists()
    for r in first:
        assert r["restored"] is None and r["epochs"] == [0, 1]
        np.testing.assert_allclose(r["loss"], want["loss"][:2], rtol=1e-5)
        np.testing.assert_allclose(r["accuracy"], want["accuracy"][:2], rtol=1e-6)

    second = run_job(tmp_path, "second", EPOCHS)
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-4"]  # epoch 1 saved again, then epoch 2
    flat_want = jax.tree_util.tree_leaves(want["params"])
    for r in second:
        assert r["restored"] == "ckpt/ckpt-2" and r["epochs"] == [2]  # resumed after the saved epoch
        np.testing.assert_allclose(r["loss"], want["loss"][2:], rtol=1e-5)
        np.testing.assert_allclose(r["accuracy"], want["accuracy"][2:], rtol=1e-6)
        got = jax.tree_util.tree_leaves(r["params"], is_leaf=lambda v: isinstance(v, list))
        assert len(got) == len(flat_want)
        for g, w in zip(got, flat_want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=1e-6)
