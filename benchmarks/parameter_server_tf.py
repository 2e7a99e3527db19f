"""TensorFlow's side of benchmarks/parameter_server.py, run by it in a child process of an
interpreter with TensorFlow 2.21 (/work/tfvenv, or TF_PYTHON): `tf.distribute`'s
ParameterServerStrategy on in-process `tf.distribute.Server`s (2 workers, 1 ps, as TensorFlow's
tutorial sets up a cluster in one process), the same MLP step (64-128-10, a batch of 64, SGD
0.01, the same initial values and data) and the same trivial step (`assign_add(1)` of one
variable), scheduled through a `ClusterCoordinator`. Prints one JSON line: seconds to import
TensorFlow, to bring the cluster up (servers, strategy, coordinator), and the per-step times of
each round (after every worker has traced and run each step once).

Run: /work/tfvenv/bin/python benchmarks/parameter_server_tf.py [--steps 50] [--trivial 200] [--rounds 5]
"""
import argparse
import json
import os
import socket
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--trivial", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    start = time.perf_counter()
    import numpy as np
    import tensorflow as tf
    imported = time.perf_counter() - start

    start = time.perf_counter()
    spec = {"worker": [f"localhost:{free_port()}" for _ in range(2)], "ps": [f"localhost:{free_port()}"]}
    cluster = tf.train.ClusterSpec(spec)
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = 4  # the tutorial's setting for a small machine (1 deadlocks)
    servers = [tf.distribute.Server(cluster, job_name="worker", task_index=i, config=config, protocol="grpc")
               for i in range(2)]
    servers.append(tf.distribute.Server(cluster, job_name="ps", task_index=0, protocol="grpc"))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    up = time.perf_counter() - start

    rng = np.random.default_rng(0)  # the same values as benchmarks/parameter_server.py
    x = rng.normal(size=(64, 64)).astype(np.float32)
    y = rng.integers(0, 10, size=(64,)).astype(np.int32)
    init = {"w1": (rng.normal(size=(64, 128)) * 0.1).astype(np.float32), "b1": np.zeros(128, np.float32),
            "w2": (rng.normal(size=(128, 10)) * 0.1).astype(np.float32), "b2": np.zeros(10, np.float32)}
    with strategy.scope():
        params = {k: tf.Variable(v, name=k) for k, v in init.items()}
        counter = tf.Variable(0, dtype=tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ params["w1"] + params["b1"])
            logits = h @ params["w2"] + params["b2"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, params)
        for k in params:
            params[k].assign_sub(0.01 * grads[k])
        return loss

    @tf.function
    def trivial():
        counter.assign_add(1)

    def per_step(fn, n: int) -> float:
        begin = time.perf_counter()
        for _ in range(n):
            coordinator.schedule(fn)
        coordinator.join()
        return (time.perf_counter() - begin) / n

    per_step(step, 10)  # every worker traces and runs each step once
    per_step(trivial, 10)
    times: dict = {"step": [], "trivial": []}
    for _ in range(args.rounds):
        times["step"].append(per_step(step, args.steps))
        times["trivial"].append(per_step(trivial, args.trivial))
    assert int(counter.read_value()) == 10 + args.rounds * args.trivial  # every scheduled step ran
    print(json.dumps({"tf": tf.__version__, "import_s": imported, "up_s": up, "load": os.getloadavg()[0],
                      **times}))


if __name__ == "__main__":
    main()
