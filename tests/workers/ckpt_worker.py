"""One worker of a multi-worker job that trains the MLP with variables, sx.Optimizer and
sx.Checkpoint (launched by tests/test_multi_worker_checkpoint.py).

Usage: ckpt_worker.py STEPS TIMEOUT_SECONDS CKPT_DIR. Resumes from the latest checkpoint in
CKPT_DIR if there is one; every worker saves after every step into CKPT_DIR (as in TensorFlow;
the chief writes the checkpoint). STEPS <= 0 trains
until killed. Prints "step N" after each step and, at the end, one JSON line with the
parameters.
"""
import json
import sys
import time

import strategax as sx

steps, timeout, ckpt_dir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
strategy = sx.MultiWorkerMirroredStrategy(
    communication_options=sx.CommunicationOptions(timeout_seconds=timeout))

import numpy as np  # noqa: E402

from mlp import data, make_variable_training  # noqa: E402

variables, optimizer, train_step, seen = make_variable_training(strategy)
checkpoint = sx.Checkpoint(params=variables, optimizer=optimizer, seen=seen)

latest = sx.latest_checkpoint(ckpt_dir)
start = 0
if latest is not None:
    checkpoint.restore(latest)
    start = int(np.asarray(optimizer.iterations.read_value()))
    print(f"resumed from {latest} at step {start}", flush=True)
total = steps if steps > 0 else 10 ** 6
x, y = data(max(total, 1) if steps > 0 else 20)
i = start
while i < total:
    lo = i % len(x)
    for batch in strategy.experimental_distribute_dataset(list(zip(x[lo:], y[lo:]))):
        train_step(*batch)
        i += 1
        checkpoint.save(ckpt_dir)
        print(f"step {i}", flush=True)
        if steps <= 0:
            time.sleep(0.02)
        if i >= total:
            break
print(json.dumps({"start": start, "params": {k: np.asarray(v.read_value()).tolist() for k, v in variables.items()}}),
      flush=True)
