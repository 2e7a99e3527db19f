"""The "Multi-worker training with Keras" tutorial's `main.py` on strategax, then its
fault-tolerance cell (`BackupAndRestore`), with only the imports and the strategy constructor
changed (and the tutorial's sizes, 64 rows per worker and 3 epochs of 70 steps, made small).

Usage: main.py RUNS EPOCHS STEPS BACKUP_DIR CHECKPOINT_DIR [KILL_AT]. RUNS: "plain" (main.py's
`fit`, with a `ModelCheckpoint` into CHECKPOINT_DIR added),
"backup" (the cell's `fit` with `BackupAndRestore(backup_dir=BACKUP_DIR)`) or "plain,backup".
KILL_AT "EPOCH:BATCH": worker 1 kills itself (SIGKILL) as that batch of the backed-up `fit`
begins. Test instrumentation, outside the tutorial's lines: a callback (`Probe`) that records
each batch's logs and kills, a `ModelCheckpoint` of every epoch's weights in
the first `fit`, and one JSON line per `fit` on stdout (its initial weights,
epochs, per-batch losses, history and final weights as this worker sees them), and after
the first `fit` a `strategy.reduce` of a tuple (what TensorFlow's Keras 3 `fit` reduces)."""
import json
import os
import signal
import sys

os.environ["KERAS_BACKEND"] = "jax"  # import change: Keras on JAX
import keras  # noqa: E402  (tf.keras)

import strategax as sx  # noqa: E402  (tf.distribute)
import mnist_setup  # noqa: E402

runs, EPOCHS, STEPS = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
backup_dir, checkpoint_dir = sys.argv[4], sys.argv[5]
kill_at = tuple(int(v) for v in sys.argv[6].split(":")) if len(sys.argv) > 6 else None


class Probe(keras.callbacks.Callback):
    """Records what `fit` does on this worker; kills worker 1 at `kill_at`."""

    def __init__(self, name, kill=None):
        super().__init__()
        self.name, self.kill, self.epoch = name, kill, None
        self.out = {"run": name, "epochs": [], "losses": []}

    def on_train_begin(self, logs=None):
        self.out["initial"] = [w.tolist() for w in self.model.get_weights()]  # after BackupAndRestore's restore

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.out["epochs"].append(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.kill == (self.epoch, batch) and strategy.cluster_resolver.task_id == 1:
            print("dying", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(self, batch, logs=None):
        self.out["losses"].append(float(logs["loss"]))

    def report(self, history):
        self.out["history"] = {k: [float(v) for v in vs] for k, vs in history.history.items()}
        self.out["final"] = [w.tolist() for w in self.model.get_weights()]
        print(json.dumps(self.out), flush=True)


# --- the tutorial's main.py ----------------------------------------------------------------
per_worker_batch_size = 8  # the tutorial's 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = sx.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

if "plain" in runs:
  with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

  probe = Probe("plain")
  saver = keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5"),
                                          save_weights_only=True)
  history = multi_worker_model.fit(multi_worker_dataset, epochs=EPOCHS, steps_per_epoch=STEPS,
                                   callbacks=[probe, saver])
  # TensorFlow's Keras 3 `fit` reduces a tuple of per-replica values (TF's MWMS refuses it):
  ids = strategy.experimental_distribute_values_from_function(
      lambda ctx: (float(ctx.replica_id_in_sync_group + 1), 2.0))
  probe.out["reduced_tuple"] = [float(v) for v in strategy.reduce(sx.ReduceOp.SUM, ids, axis=None)]
  probe.report(history)

# --- the tutorial's "BackupAndRestore callback" cell -------------------------------------------
if "backup" in runs:
  callbacks = [keras.callbacks.BackupAndRestore(backup_dir=backup_dir)]
  with strategy.scope():
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()
  probe = Probe("backup", kill_at)
  history = multi_worker_model.fit(multi_worker_dataset,
                                   epochs=EPOCHS,
                                   steps_per_epoch=STEPS,
                                   callbacks=callbacks + [probe])
  probe.report(history)
