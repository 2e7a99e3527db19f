"""Record how tf.distribute.MultiWorkerMirroredStrategy splits input between workers: two
TensorFlow worker processes on loopback (TF_CONFIG, one CPU replica each), every
`tf.data.experimental.AutoShardPolicy` on `experimental_distribute_dataset` of an in-memory
dataset, and `distribute_datasets_from_function` (the InputContext each worker gets).

Writes tests/data/tf/multi_worker_input.json via run_all.sh. The scenario `split_w2` starts
the two workers itself (hidden scenario `_worker`, one process each, TF_CONFIG set).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, err, main  # noqa: E402

POLICIES = ("AUTO", "DATA", "FILE", "OFF")
# (number of elements, global batch size): full batches with a partial last batch of 2 or 3
# rows, an even split, and an odd global batch (5 = 3 + 2) whose last batch has 1 row
CONFIGS = ((10, 4), (11, 4), (12, 6), (11, 5))
MAX_STEPS = 20
WORKER_TIMEOUT = 240


def case_name(n, batch, policy):
    return "range%d_b%d_%s" % (n, batch, policy)


def _iterate(st, dist):
    steps = []
    for i, element in enumerate(dist):
        if i >= MAX_STEPS:
            break
        steps.append([c.numpy().tolist() for c in st.experimental_local_results(element)])
    return steps


@scenario("_worker", devices=(1,))
def worker(tf, _n):
    """One worker of split_w2 (TF_CONFIG set by the parent)."""
    import numpy as np
    st = tf.distribute.MultiWorkerMirroredStrategy()
    cases = {}
    for n, batch in CONFIGS:
        for policy in POLICIES:
            ds = tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.float32)).batch(batch)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
            try:
                cases[case_name(n, batch, policy)] = _iterate(
                    st, st.experimental_distribute_dataset(ds.with_options(options)))
            except Exception as e:  # noqa: BLE001 -- recorded
                cases[case_name(n, batch, policy)] = err(e)
    contexts = []

    def dataset_fn(ctx):
        contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
        first = 100 * ctx.input_pipeline_id
        return tf.data.Dataset.from_tensor_slices(np.arange(first, first + 6, dtype=np.float32)).batch(2)

    steps = _iterate(st, st.distribute_datasets_from_function(dataset_fn))
    return {"task_index": st.cluster_resolver.task_id, "num_replicas_in_sync": st.num_replicas_in_sync,
            "cases": cases, "from_function": {"contexts": contexts, "steps": steps}}


@scenario("pipeline_w2", devices=(1,))
def pipeline_w2(tf, _n):
    """TensorFlow's own per-worker input pipeline, called in one process as input_lib calls it
    for worker w of W=2 with R replicas each (N = 2R): rebatch(batch_sizes_for_worker(B, W, R, w))
    then input_ops.auto_shard_dataset(ds, W, w, N). TF's CPU MultiWorkerMirroredStrategy runs
    one replica per worker, so R=2 cannot be recorded from a real job; R=1 here reproduces the
    real two-process job (split_w2). streams[R][NAME][w] = worker w's elements in order (its
    local replica j takes elements j, j+R, ... : element k is step k // R, replica k % R)."""
    import numpy as np
    from tensorflow.python.data.experimental.ops import distribute
    from tensorflow.python.distribute import input_ops
    workers, streams = 2, {}
    for per_worker in (1, 2):
        n_replicas = workers * per_worker
        cases = streams[str(per_worker)] = {}
        for n, batch in CONFIGS:
            for policy in POLICIES:
                if policy == "FILE":
                    continue
                out = []
                for w in range(workers):
                    ds = tf.data.Dataset.from_tensor_slices(np.arange(n, dtype=np.float32)).batch(batch)
                    options = tf.data.Options()
                    options.experimental_distribute.auto_shard_policy = getattr(
                        tf.data.experimental.AutoShardPolicy, policy)
                    ds = ds.with_options(options)
                    sizes = distribute.batch_sizes_for_worker(distribute.compute_batch_size(ds), workers, per_worker, w)
                    ds = input_ops.auto_shard_dataset(ds.rebatch(sizes), workers, w, n_replicas)
                    out.append([x.tolist() for x in ds.as_numpy_iterator()])
                cases[case_name(n, batch, policy)] = out
    return {"streams": streams}


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@scenario("split_w2", devices=None)
def split_w2(_tf, _n):
    """Two TensorFlow workers (TF_CONFIG on 127.0.0.1, one CPU replica each). cases[NAME] per
    worker: experimental_distribute_dataset(from_tensor_slices(np.arange(N, float32)).batch(B))
    with options.experimental_distribute.auto_shard_policy = POLICY (NAME = rangeN_bB_POLICY);
    steps[i] = this worker's experimental_local_results (one list per local replica), or the
    error iterating raised. from_function: the InputContext each worker's dataset_fn got
    [num_input_pipelines, input_pipeline_id, num_replicas_in_sync] and its steps, dataset_fn
    giving from_tensor_slices(100 * input_pipeline_id + np.arange(6)).batch(2)."""
    addresses = ["127.0.0.1:%d" % p for p in _free_ports(2)]
    script = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as d:
        procs, outs = [], []
        for i in range(2):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": addresses},
                                                         "task": {"type": "worker", "index": i}}))
            out = os.path.join(d, "worker%d.json" % i)
            outs.append(out)
            procs.append(subprocess.Popen([sys.executable, script, "--scenario", "_worker_r1", "--out", out],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + WORKER_TIMEOUT
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[1])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError("a TensorFlow worker did not finish within %d s" % WORKER_TIMEOUT) from None
        workers = []
        for i, out in enumerate(outs):
            if procs[i].returncode != 0 or not os.path.exists(out):
                raise RuntimeError("worker %d failed: %s" % (i, logs[i][-500:]))
            with open(out) as f:
                rec = json.load(f)
            workers.append(rec["result"])
        return {"tf_version": rec.get("tf_version"), "workers": workers}


if __name__ == "__main__":
    sys.exit(main())
