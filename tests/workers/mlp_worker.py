"""One worker of a multi-worker MLP training job (launched by tests/test_multi_worker.py).

Usage: mlp_worker.py STEPS [TIMEOUT_SECONDS [HEARTBEAT_SECONDS [JOIN_SECONDS]]] ("none": the
default). Reads TF_CONFIG; the device count comes from
XLA_FLAGS set by the launcher. Prints "step N" after each step and, at the end, one JSON line
with the loss per step and the final parameters (as seen by this worker).
"""
import json
import sys
import time

import strategax as sx  # before any JAX computation: the strategy joins the cluster first

steps = int(sys.argv[1])
timeout, heartbeat, join = (float(a) if a != "none" else None for a in (sys.argv[2:] + ["none"] * 3)[:3])
strategy = sx.MultiWorkerMirroredStrategy(
    communication_options=sx.CommunicationOptions(timeout_seconds=timeout), heartbeat_timeout_seconds=heartbeat,
    join_timeout_seconds=join)

import numpy as np  # noqa: E402

from mlp import data, init_params, make_step  # noqa: E402

x, y = data(max(steps, 1) if steps > 0 else 10)
params = init_params()
tx, step = make_step(strategy)
opt_state = tx.init(params)
losses = []
i = 0
dataset = strategy.experimental_distribute_dataset(list(zip(x, y)))
while steps <= 0 or i < steps:  # steps <= 0: train until killed (the fault test)
    for batch in dataset:
        params, opt_state, loss = step(params, opt_state, batch)
        losses.append(float(loss))
        i += 1
        print(f"step {i}", flush=True)
        if steps <= 0:
            time.sleep(0.02)
        if 0 < steps <= i:
            break
local = strategy.experimental_local_results(params["w1"])
contexts = []


def dataset_fn(ctx):  # one input pipeline per worker: element j of pipeline p holds 10 * p + j
    contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    return [np.full((2, 1), 10 * ctx.input_pipeline_id + j, np.float32) for j in range(3)]


dealt = [[float(np.asarray(v)[0, 0]) if np.shape(v)[0] else None for v in strategy.experimental_local_results(b)]
         for b in strategy.distribute_datasets_from_function(dataset_fn)]
print(json.dumps({
    "worker": strategy.cluster_resolver.task_id, "task_type": strategy.cluster_resolver.task_type,
    "replicas": strategy.num_replicas_in_sync, "local_results": len(local),
    "worker_devices": len(strategy.extended.worker_devices), "should_checkpoint": strategy.extended.should_checkpoint,
    "losses": losses, "input_contexts": contexts, "dealt": dealt,
    "params": {k: np.asarray(v).tolist() for k, v in params.items()},
}), flush=True)
