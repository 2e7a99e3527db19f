"""Multi-worker jobs of real processes on loopback: every socket on the TF_CONFIG host,
variables that start equal, input shared per worker as TensorFlow shares it, and start-up and
compile-time faults named on every worker within seconds."""
import json
import socket
from pathlib import Path

import numpy as np
import optax
import pytest

from multi_worker_launch import Job, free_ports

WORKERS = Path(__file__).resolve().parent / "workers"
RECORDED = json.loads((Path(__file__).parent / "data/tf/multi_worker_input.json").read_text())["scenarios"]
HOST = "127.0.0.2"  # a loopback address that is neither 127.0.0.1 nor what the hostname resolves to


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    """One 2-worker job (1 device each, TF_CONFIG on 127.0.0.2) running features_worker.py."""
    with Job(tmp_path_factory.mktemp("features"), num_workers=2, devices=1, args=[],
             script=WORKERS / "features_worker.py", host=HOST) as job:
        codes = job.wait(timeout=150)
        assert codes == [0, 0], job.logs()
        return job.addresses, [job.result(0), job.result(1)]


def test_every_socket_a_worker_listens_on_is_on_its_tf_config_host(features):
    # Intent: the coordination service (worker 0), the liveness server (worker 1) and gloo's
    # transport listen on the TF_CONFIG host only: never all interfaces (JAX's default
    # "[::]:port"), never the address the machine's hostname resolves to (gloo's default).
    addresses, results = features
    for address, r in zip(addresses, results):
        assert address in r["listening"], r["listening"]  # its own TF_CONFIG port
        assert len(r["listening"]) >= 2  # ... and gloo's transport
        assert all(a.startswith(HOST + ":") for a in r["listening"]), r["listening"]


def test_variables_from_different_unseeded_values_start_as_worker_zeros(features):
    # Intent: each worker draws its own initial values; the variables (and the optimizer's
    # slots) take worker 0's on every worker, as TensorFlow broadcasts the chief's; one Adam
    # step later both hold optax's step from worker 0's value with the SUM of the 2 replicas'
    # gradients.
    _, (w0, w1) = features
    assert w0["own"] != w1["own"]
    assert w0["initial"] == w1["initial"] == w0["own"]
    tx = optax.adam(0.1)
    start = np.asarray(w0["own"]["w"], np.float32)
    updates, state = tx.update(np.full(3, 2.0, np.float32), tx.init(start), start)
    expected = optax.apply_updates(start, updates)
    for r in (w0, w1):
        np.testing.assert_allclose(r["trained"]["w"][0], expected, rtol=1e-6)
        np.testing.assert_allclose(r["trained"]["slots"][1], state[0].mu, rtol=1e-6)
        np.testing.assert_allclose(r["trained"]["slots"][2], state[0].nu, rtol=1e-6)
    assert w0["trained"] == w1["trained"]


def test_a_sync_on_read_variable_reads_its_aggregate_over_every_worker(features):
    # Intent: a cross-replica read of a sync-on-read variable aggregates the copies of every
    # worker, not only this process's (TensorFlow all-reduces across the job): replica 0 (worker
    # 0) added 1 and replica 1 (worker 1) added 2, so SUM reads 3, MEAN 1.5 and
    # ONLY_FIRST_REPLICA replica 0's 1 on both workers.
    _, results = features
    for r in results:
        assert r["sync_on_read"] == {"SUM": 3.0, "MEAN": 1.5, "ONLY_FIRST_REPLICA": 1.0}


def test_each_worker_reads_its_share_of_the_input_as_tensorflow_does(features):
    # Intent: experimental_distribute_dataset under every AutoShardPolicy (set through
    # sx.InputOptions) gives each worker the batches TensorFlow 2.21 gave the same worker of a
    # real two-worker job (recorded): DATA and AUTO a share of each batch, OFF every batch cut
    # into per-replica batches, FILE an error (the dataset reads no files).
    _, results = features
    tf_workers = RECORDED["split_w2"]["result"]["workers"]
    for r, tf in zip(results, tf_workers):
        assert r["task_index"] == tf["task_index"]
        assert r["cases"].keys() == tf["cases"].keys()
        for name, expected in tf["cases"].items():
            got = r["cases"][name]
            if isinstance(expected, dict):  # TensorFlow: NotFoundError "Found an unshardable source dataset"
                assert expected["error"] == "NotFoundError" and "unshardable" in expected["message"]
                assert got["error"] == "DistributionValueError", (name, got)
                assert "FILE" in got["message"] and "features_worker.py:" in got["message"]
            else:
                assert got == expected, (r["task_index"], name)


def test_datasets_from_function_runs_once_per_worker_as_tensorflow_does(features):
    # Intent: dataset_fn runs once on each worker with input_pipeline_id = the worker's index,
    # and that worker's replicas get its elements (recorded from TensorFlow's two-worker job).
    _, results = features
    for r, tf in zip(results, RECORDED["split_w2"]["result"]["workers"]):
        assert r["from_function"] == tf["from_function"]


def test_next_inside_a_step_takes_the_batches_of_one_process(features):
    # Intent: `next(iterator)` inside a strategy.function, with two workers, for
    # experimental_distribute_dataset (global batches of 4) and distribute_datasets_from_function
    # (each worker's shard, batches of 2): every step reduces the same 4 rows as one process
    # taking the global batches in order (NumPy: sum of the rows + 10 * sum of the labels).
    x, y = np.arange(24, dtype=np.float32).reshape(12, 2), np.arange(12)
    want = [float(x[4 * s:4 * s + 4].sum() + 10 * y[4 * s:4 * s + 4].sum()) for s in range(3)]
    for r in features[1]:
        assert r["inside"] == {"dataset": want, "from_function": want}


def test_local_results_of_an_x_y_batch_are_this_workers_pairs(features):
    # Intent: experimental_local_results of an (x, y) batch gives one (x, y) per local replica
    # (it raised IndexError with several workers): worker w's replica holds rows 2w and 2w + 1.
    x, y = np.arange(24, dtype=np.float32).reshape(12, 2), np.arange(12)
    for w, r in enumerate(features[1]):
        assert r["local_pairs"] == [[x[2 * w:2 * w + 2].tolist(), y[2 * w:2 * w + 2].tolist()]]


# --- faults --------------------------------------------------------------------------------
@pytest.mark.parametrize("taken", [0, 1], ids=["coordinator-port", "worker-port"])
def test_a_taken_port_is_named_on_every_worker_within_seconds(tmp_path, taken):
    # Intent: another program holds one worker's TF_CONFIG port. Every worker (3 here) exits 1
    # within seconds with a ClusterStartError naming the task and the port: no segfault, no
    # bare JaxRuntimeError, no 2-minute wait for the coordinator.
    ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    role = "chief/coordinator" if taken == 0 else "worker"
    named = f"worker {taken} ({role}, task index {taken}, {addresses[taken]})"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[taken]))
        squatter.listen()
        with Job(tmp_path, num_workers=3, devices=1, args=["1"], addresses=addresses) as job:
            exits = job.exit_times(timeout=90)
            errs = [job.stderr(i) for i in range(3)]
    for (code, seconds), err in zip(exits, errs):
        assert code == 1, err
        assert seconds < 45, (seconds, err)
        assert "ClusterStartError" in err and named in err and f"port {ports[taken]} is taken" in err, err
        assert "mlp_worker.py:" in err  # the line that created the strategy
        assert "JaxRuntimeError" not in err


def test_a_worker_lost_while_the_first_step_compiles_is_named_on_every_survivor(tmp_path):
    # Intent: worker 1 of 3 dies as the others compile their first step (no timeout_seconds
    # set: JAX's own heartbeat would take 100 s); workers 0 and 2 exit 1 within seconds, each
    # naming worker 1.
    with Job(tmp_path, num_workers=3, devices=1, args=["1"], script=WORKERS / "compile_fault_worker.py") as job:
        exits = job.exit_times(timeout=90)
        errs = [job.stderr(i) for i in range(3)]
        named = f"worker 1 (worker, task index 1, {job.addresses[1]}) was lost"
    assert exits[1][0] == -9
    for i in (0, 2):
        code, seconds = exits[i]
        assert code == 1, errs[i]
        assert seconds < 45, (seconds, errs[i])
        assert named in errs[i], errs[i]
        assert "finished" not in (tmp_path / f"worker{i}.out").read_text()
