"""One worker of a job (tests/test_multi_worker_safety.py) that reports, as one JSON line:
the addresses this process listens on, the variables it created from its own unseeded values
(and their values after one optimizer step), the cross-replica reads of sync-on-read variables, and
its share of the input under each AutoShardPolicy for the datasets of tests/data/tf/multi_worker_input.json;
the results of steps that take their batch with `next(iterator)` inside, and the local results of an
(x, y) batch.
"""
import json
import os

import strategax as sx  # before any JAX computation: the strategy joins the cluster first

strategy = sx.MultiWorkerMirroredStrategy()

import ipaddress  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

CONFIGS = ((10, 4), (11, 4), (12, 6), (11, 5))  # as tools/tf_record/record_multi_worker_input.py
POLICIES = ("AUTO", "DATA", "FILE", "OFF")


def listening() -> list[str]:
    """host:port of every TCP socket this process listens on (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                hex_ip, hex_port = fields[1].split(":")
                raw = bytes.fromhex(hex_ip)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
                ip = ipaddress.ip_address(raw) if width == 4 else ipaddress.IPv6Address(raw)
                if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                    ip = ip.ipv4_mapped
                found.append(f"{ip}:{int(hex_port, 16)}")
    return sorted(found)


# --- variables from values that differ between the workers ---------------------------------
rng = np.random.default_rng()  # unseeded: every worker draws its own
own = {"w": rng.normal(size=(3,)).astype(np.float32), "count": int(rng.integers(1 << 30))}
with strategy.scope():
    w = sx.Variable(own["w"], name="w")
    count = sx.Variable(own["count"], name="count")
    optimizer = sx.Optimizer(optax.adam(0.1))
initial = {"w": np.asarray(w.read_value()).tolist(), "count": int(count.read_value())}


@strategy.function
def train_step():
    def step():
        optimizer.apply_gradients([(jnp.ones(3, jnp.float32), w)])  # SUM over the replicas
        count.assign_add(1)
    strategy.run(step)


train_step()

# --- sync-on-read variables: each replica adds its id + 1 (worker 0: 1, worker 1: 2) -------------
with strategy.scope():
    on_read = {agg: sx.Variable(0.0, synchronization=sx.VariableSynchronization.ON_READ,
                                aggregation=getattr(sx.VariableAggregation, agg), name=f"on_read_{agg}")
               for agg in ("SUM", "MEAN", "ONLY_FIRST_REPLICA")}


@strategy.function
def add_replica_ids():
    def step():
        rid = sx.get_replica_context().replica_id_in_sync_group
        for v in on_read.values():
            v.assign_add(jnp.asarray(rid, jnp.float32) + 1.0)
    strategy.run(step)


add_replica_ids()
sync_on_read = {agg: float(v.read_value()) for agg, v in on_read.items()}
trained = {"w": [np.asarray(c).tolist() for c in w.values],
           "slots": [np.asarray(s.read_value()).tolist() for _, _, s in optimizer.slot_variables()]}

# --- input per worker ---------------------------------------------------------------------
cases = {}
for n, batch in CONFIGS:
    x = np.arange(n, dtype=np.float32)
    batches = [x[i:i + batch] for i in range(0, n, batch)]
    for policy in POLICIES:
        name = f"range{n}_b{batch}_{policy}"
        try:
            dist = strategy.experimental_distribute_dataset(
                batches, options=sx.InputOptions(auto_shard_policy=getattr(sx.AutoShardPolicy, policy)))
            cases[name] = [[np.asarray(c).tolist() for c in strategy.experimental_local_results(e)] for e in dist]
        except ValueError as e:
            cases[name] = {"error": type(e).__name__, "message": str(e)}
contexts = []


def dataset_fn(ctx):  # as the TensorFlow recording's
    contexts.append([ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync])
    first = 100 * ctx.input_pipeline_id
    return [np.arange(first + i, first + i + 2, dtype=np.float32) for i in range(0, 6, 2)]


from_function = [[np.asarray(c).tolist() for c in strategy.experimental_local_results(e)]
                 for e in strategy.distribute_datasets_from_function(dataset_fn)]

# --- next(iterator) inside a compiled step, and the local results of an (x, y) batch ----------
x = np.arange(24, dtype=np.float32).reshape(12, 2)
y = np.arange(12, dtype=np.int64)


@strategy.function
def take_step(iterator):
    def per_replica(inputs):
        rows, labels = inputs
        return jnp.sum(rows) + 10.0 * jnp.sum(labels.astype(jnp.float32))
    return strategy.reduce("sum", strategy.run(per_replica, args=(next(iterator),)), axis=None)


def pairs_fn(ctx):  # the tutorial's dataset_fn: this worker's shard, batched per replica
    return sx.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(2)


global_batches = sx.data.Dataset.from_tensor_slices((x, y)).batch(4)
inside = {}
for name, dist in (("dataset", strategy.experimental_distribute_dataset(global_batches)),
                   ("from_function", strategy.distribute_datasets_from_function(pairs_fn))):
    iterator = iter(dist)
    inside[name] = [float(take_step(iterator)) for _ in range(3)]
first = next(iter(strategy.experimental_distribute_dataset(global_batches)))
local_pairs = [[np.asarray(r).tolist(), np.asarray(c).tolist()] for r, c in strategy.experimental_local_results(first)]

print(json.dumps({
    "task_index": strategy.cluster_resolver.task_id, "address": strategy.cluster_resolver.master(),
    "listening": listening(), "own": {"w": own["w"].tolist(), "count": own["count"]}, "initial": initial,
    "trained": trained, "sync_on_read": sync_on_read, "cases": cases,
    "from_function": {"contexts": contexts, "steps": from_function},
    "inside": inside, "local_pairs": local_pairs,
}), flush=True)
