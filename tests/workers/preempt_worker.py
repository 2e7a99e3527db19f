"""A training script written as TensorFlow's PreemptionCheckpointHandler guide writes it
(launched by tests/test_preemption.py), one process or one worker of a multi-worker job.

Usage: preempt_worker.py STEPS CKPT_DIR PAUSE. The handler restores the latest checkpoint in
CKPT_DIR (through an async CheckpointManager, which also saves every 5 steps, the last one
still being written when the program ends); each step goes through `handler.run`, so a
SIGTERM makes every worker save at the same step boundary and exit with code 42. Prints "start N"
(the restored run count), "step N" after each step (then sleeps PAUSE seconds, room for the
notice to arrive mid-run: JAX notices a SIGTERM within ~0.2 s) and, at the end, one JSON line with the parameters.
"""
import json
import sys
import time

import strategax as sx  # before any JAX computation: the strategy joins the cluster first

steps, ckpt_dir, pause = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
strategy = sx.MultiWorkerMirroredStrategy(communication_options=sx.CommunicationOptions(timeout_seconds=60))

import numpy as np  # noqa: E402

from mlp import data, make_variable_training  # noqa: E402

variables, optimizer, train_step, seen = make_variable_training(strategy)
checkpoint = sx.Checkpoint(params=variables, optimizer=optimizer, seen=seen)
manager = sx.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=2, async_save=True)
handler = sx.PreemptionCheckpointHandler(strategy.cluster_resolver, manager)
start = handler.total_run_calls
print(f"start {start}", flush=True)
restored_seen = [float(np.asarray(c)) for c in seen.values]  # this worker's copies
x, y = data(steps)
batches = iter(strategy.experimental_distribute_dataset(list(zip(x[start:], y[start:]))))
with handler.watch_preemption_scope():
    while handler.total_run_calls < steps:
        handler.run(train_step, *next(batches))
        print(f"step {handler.total_run_calls}", flush=True)
        if handler.total_run_calls % 5 == 0:
            manager.save()  # the regular checkpoints, written while training goes on
        time.sleep(pause)
print(json.dumps({"start": start, "restored_seen": restored_seen,
                  "params": {k: np.asarray(v.read_value()).tolist() for k, v in variables.items()}}),
      flush=True)
