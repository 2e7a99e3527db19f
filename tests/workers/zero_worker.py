"""One worker of a multi-worker job training the MLP with sx.Optimizer(shard_state=True): the
slots split over every replica of every worker (launched by tests/test_sharded_optimizer_workers.py).

Usage: zero_worker.py STEPS CKPT_DIR. Trains STEPS steps, saves a checkpoint into CKPT_DIR, and
prints one JSON line with the parameters, every slot (whole) and each slot's piece shapes here.
"""
import json
import sys

import strategax as sx

steps, ckpt_dir = int(sys.argv[1]), sys.argv[2]
strategy = sx.MultiWorkerMirroredStrategy(communication_options=sx.CommunicationOptions(timeout_seconds=60))

import numpy as np  # noqa: E402

from mlp import data, make_variable_training  # noqa: E402

variables, optimizer, train_step, _ = make_variable_training(strategy, shard_state=True)
x, y = data(steps)
for batch in strategy.experimental_distribute_dataset(list(zip(x, y))):
    train_step(*batch)
sx.Checkpoint(params=variables, optimizer=optimizer).save(ckpt_dir)
slots = {f"{path[-1]}/{v.name}": s for v, path, s in optimizer.slot_variables()}
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync, "shard_state": optimizer.shard_state,
    "params": {k: np.asarray(v.numpy()).tolist() for k, v in variables.items()},
    "slots": {k: np.asarray(s.numpy()).tolist() for k, s in slots.items()},
    "pieces": {k: [list(c.shape) for c in s.values] for k, s in slots.items() if not k.startswith("count")},
}), flush=True)
