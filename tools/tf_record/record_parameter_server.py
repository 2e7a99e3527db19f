"""Record TensorFlow's ParameterServerStrategy: the partitioners' shard counts, the shards a
partitioned variable gets (shapes, names, parameter servers) and where unpartitioned
variables go (round-robin), on an in-process cluster of 2 workers and 2 parameter servers
(TensorFlow's own tutorial setup: `tf.distribute.Server`s in this process, free ports on
127.0.0.1). `lost_updates` schedules the tutorial's Keras training step and plain
`assign_add(1)` steps and records the counts TensorFlow ends at (not exact: for the docs).

Writes tests/data/tf/parameter_server.json via run_all.sh.  Each scenario runs in its own
process: ``python record_parameter_server.py --scenario NAME``.
"""

import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, main  # noqa: E402

# (partitioner name, constructor kwargs); the shapes and dtypes each is applied to
PARTITIONERS = [
    ("FixedShardsPartitioner", {"num_shards": 2}),
    ("FixedShardsPartitioner", {"num_shards": 3}),
    ("FixedShardsPartitioner", {"num_shards": 5}),
    ("MinSizePartitioner", {"min_shard_bytes": 16, "max_shards": 3}),
    ("MinSizePartitioner", {"min_shard_bytes": 64, "max_shards": 8}),
    ("MinSizePartitioner", {"min_shard_bytes": 256 << 10, "max_shards": 4}),
    ("MaxSizePartitioner", {"max_shard_bytes": 16}),
    ("MaxSizePartitioner", {"max_shard_bytes": 40, "max_shards": 2}),
    ("MaxSizePartitioner", {"max_shard_bytes": 100}),
]
SHAPES = [([10, 4], "float32"), ([7], "float32"), ([3, 2], "float32"), ([10, 3], "int32"),
          ([1, 8], "float32"), ([16, 2, 2], "float64")]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster(tf, num_workers, num_ps):
    """An in-process cluster (the tutorial's create_in_process_cluster) and its resolver."""
    ports = _free_ports(num_workers + num_ps)
    spec = {"worker": ["127.0.0.1:%d" % p for p in ports[:num_workers]],
            "ps": ["127.0.0.1:%d" % p for p in ports[num_workers:]]}
    cluster_spec = tf.train.ClusterSpec(spec)
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = num_workers + 1  # the tutorial's: fewer can deadlock
    for i in range(num_workers):
        tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, config=config, protocol="grpc")
    for i in range(num_ps):
        tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc")
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")


@scenario("partitions", devices=(1,))
def partitions(tf, _n):
    """partitions[i] = {partitioner, kwargs, cases: [{shape, dtype, partitions}]}: what the
    partitioner returns for each shape (its __call__(TensorShape, dtype))."""
    out = []
    for name, kwargs in PARTITIONERS:
        p = getattr(tf.distribute.experimental.partitioners, name)(**kwargs)
        cases = []
        for shape, dtype in SHAPES:
            cases.append({"shape": shape, "dtype": dtype,
                          "partitions": [int(x) for x in p(tf.TensorShape(shape), tf.as_dtype(dtype))]})
        out.append({"partitioner": name, "kwargs": kwargs, "cases": cases})
    return {"partitions": out}


def _describe(v):
    if hasattr(v, "variables"):  # a ShardedVariable
        return {"type": type(v).__name__, "shape": v.shape.as_list(),
                "shards": [{"name": s.name, "shape": s.shape.as_list(), "device": s.device,
                            "value": s.numpy().tolist()} for s in v.variables]}
    return {"type": type(v).__name__, "name": v.name, "shape": v.shape.as_list(), "device": v.device}


@scenario("sharded_variables", devices=(1,))
def sharded_variables(tf, _n):
    """2 workers, 2 parameter servers. For each partitioner: the variables created in order
    (a [10, 4] float32 arange, a [3, 2] one, a [7] one, a scalar) as TensorFlow creates them:
    ShardedVariable shards (name, shape, device, value) or a plain variable's device. Then
    without a partitioner: five variables' devices (round-robin)."""
    import numpy as np
    resolver = _cluster(tf, 2, 2)
    out = []
    for name, kwargs in PARTITIONERS[:5] + PARTITIONERS[6:8]:
        st = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=getattr(tf.distribute.experimental.partitioners, name)(**kwargs))
        made = []
        with st.scope():
            for shape in ([10, 4], [3, 2], [7], []):
                init = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
                made.append(_describe(tf.Variable(init, name="v%d" % len(made))))
        out.append({"partitioner": name, "kwargs": kwargs, "variables": made})
    st = tf.distribute.experimental.ParameterServerStrategy(resolver)
    with st.scope():
        plain = [_describe(tf.Variable(float(i), name="p%d" % i)) for i in range(5)]
    return {"partitioned": out, "round_robin": plain}


@scenario("lost_updates", devices=(1,))
def lost_updates(tf, _n):
    """2 workers, 1 parameter server, the tutorial's custom training loop (a Keras Dense model,
    RMSprop, a per-worker dataset): 21 scheduled steps, 3 times; optimizer.iterations and a
    plain tf.Variable's assign_add(1) count after each join. Not exact in TensorFlow: the record
    is for the docs."""
    resolver = _cluster(tf, 2, 1)
    st = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(st)

    def dataset_fn(_):
        x = tf.random.uniform((64, 10))
        y = tf.random.uniform((64, 1), maxval=2, dtype=tf.int32)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

    @tf.function
    def per_worker_dataset_fn():
        return st.distribute_datasets_from_function(dataset_fn)

    with st.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid")])
        model.build((None, 10))
        optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.1)
        optimizer.build(model.trainable_variables)
        counter = tf.Variable(0, dtype=tf.int64)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(iterator):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(tf.cast(y, tf.float32), pred))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            counter.assign_add(1)
            return loss
        x, y = next(iterator)
        return st.run(replica_fn, args=(x, y))

    rounds = []
    for _ in range(3):
        for _ in range(21):
            coordinator.schedule(step_fn, args=(iterator,))
        coordinator.join()
        rounds.append({"iterations": int(optimizer.iterations.numpy()), "assign_add": int(counter.numpy())})
    return {"scheduled_per_round": 21, "rounds": rounds}


if __name__ == "__main__":
    sys.exit(main())
