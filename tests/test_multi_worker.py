"""MultiWorkerMirroredStrategy: real worker processes on loopback (jax.distributed + gloo),
faults, and TF_CONFIG parsing."""
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

from multi_worker_launch import Job

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from mlp import make_step, init_params, data, reference_training  # noqa: E402

STEPS = 6




def train_in_process(strategy, steps):
    x, y = data(steps)
    tx, step = make_step(strategy)
    params = init_params()
    opt_state = tx.init(params)
    losses = []
    for batch in strategy.experimental_distribute_dataset(list(zip(x, y))):
        params, opt_state, loss = step(params, opt_state, batch)
        losses.append(float(loss))
    return losses, {k: np.asarray(v) for k, v in params.items()}


# --- real processes ------------------------------------------------------------------------
def test_two_workers_of_two_devices_train_like_one_process_and_one_device(tmp_path):
    # Intent: 2 processes x 2 devices (4 replicas over gloo) give the losses and parameters of
    # 1 process x 4 devices and of plain JAX on one device; each worker sees its 2 replicas.
    with Job(tmp_path, num_workers=2, devices=2, args=[str(STEPS)]) as job:
        codes = job.wait(timeout=90)
        assert codes == [0, 0], job.logs()
        results = [job.result(0), job.result(1)]
    ref_losses, ref_params = reference_training(STEPS)
    four_losses, four_params = train_in_process(sx.MirroredStrategy(jax.devices()[:4]), STEPS)
    np.testing.assert_allclose(four_losses, ref_losses, rtol=1e-5)
    for w, r in enumerate(results):
        assert (r["worker"], r["task_type"], r["replicas"], r["local_results"]) == (w, "worker", 4, 2)
        assert r["input_contexts"] == [[2, w, 4]]  # one input pipeline per worker
        assert (r["worker_devices"], r["should_checkpoint"]) == (2, w == 0)  # only the chief saves
        # the pipeline's 3 elements dealt to this worker's 2 replicas; the last step's second
        # replica gets an empty batch (None: no row)
        assert r["dealt"] == [[10 * w, 10 * w + 1], [10 * w + 2, None]]
        np.testing.assert_allclose(r["losses"], four_losses, rtol=1e-5)
        np.testing.assert_allclose(r["losses"], ref_losses, rtol=1e-5)
        for k in ref_params:
            np.testing.assert_allclose(np.asarray(r["params"][k]), four_params[k], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.asarray(r["params"][k]), ref_params[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("victim,survivor", [(1, 0), (0, 1)], ids=["worker", "coordinator"])
def test_killed_worker_makes_the_survivor_exit_quickly(tmp_path, victim, survivor):
    # Intent: SIGKILL one worker mid-training; the other must exit non-zero within
    # timeout_seconds + 30 s, never hang, with a message naming the lost worker. (A lost
    # coordinator makes JAX abort the survivor at once; its watcher process names it.)
    timeout = 5
    with Job(tmp_path, num_workers=2, devices=2, args=["0", str(timeout)]) as job:
        job.wait_for_line(victim, "step 3", timeout=60)
        job.procs[victim].kill()
        start = time.monotonic()
        code = job.procs[survivor].wait(timeout + 30)
        elapsed = time.monotonic() - start
        lost = (f"worker {victim} (worker, task index {victim}, 127.0.0.1:" if victim else
                "worker 0 (chief/coordinator, task index 0, 127.0.0.1:")
        while lost not in job.stderr(survivor) and time.monotonic() - start < timeout + 30:
            time.sleep(0.1)  # a lost coordinator is named by the survivor's watcher, just after it exits
        err = job.stderr(survivor)
    assert code != 0, err
    assert elapsed < timeout + 30
    assert lost in err and "was lost" in err, err


# --- one process ---------------------------------------------------------------------------
def test_without_tf_config_is_one_worker_of_all_local_devices(monkeypatch):
    # Intent: no TF_CONFIG means a one-worker cluster (TensorFlow's behaviour): all local
    # devices, training equal to plain JAX on one device.
    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = sx.MultiWorkerMirroredStrategy()
    assert strategy.num_replicas_in_sync == len(jax.local_devices())
    assert strategy.cluster_resolver.task_type is None and strategy.cluster_resolver.task_id is None
    losses, params = train_in_process(strategy, 3)
    ref_losses, ref_params = reference_training(3)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for k in ref_params:
        np.testing.assert_allclose(params[k], ref_params[k], rtol=1e-5, atol=1e-6)


def test_input_context_of_a_one_worker_cluster(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    strategy = sx.MultiWorkerMirroredStrategy()
    seen = []

    def dataset_fn(ctx):
        seen.append(ctx)
        return [np.full((2, 1), i, np.float32) for i in range(strategy.num_replicas_in_sync)]

    batches = list(strategy.distribute_datasets_from_function(dataset_fn))
    assert seen == [sx.InputContext(1, 0, strategy.num_replicas_in_sync)]
    assert len(batches) == 1
    assert [float(v[0, 0]) for v in batches[0].values] == list(range(strategy.num_replicas_in_sync))


def set_tf_config(monkeypatch, value):
    monkeypatch.setenv("TF_CONFIG", value if isinstance(value, str) else json.dumps(value))


def test_tf_config_is_read_as_tensorflow_reads_it(monkeypatch):
    # Intent: the seed's example: cluster with worker and ps jobs, task worker 0.
    set_tf_config(monkeypatch, {"cluster": {"worker": ["localhost:12345", "localhost:23456"],
                                            "ps": ["localhost:34567"]},
                                "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})
    r = sx.cluster_resolver.TFConfigClusterResolver()
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "grpc")
    assert r.cluster_spec().as_dict() == {"worker": ["localhost:12345", "localhost:23456"],
                                          "ps": ["localhost:34567"]}
    assert r.master() == "grpc://localhost:23456"
    assert r.worker_addresses() == ["localhost:12345", "localhost:23456"] and r.worker_index() == 1


def test_chief_is_worker_zero(monkeypatch):
    set_tf_config(monkeypatch, {"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]},
                                "task": {"type": "worker", "index": 1}})
    r = sx.cluster_resolver.TFConfigClusterResolver()
    assert r.worker_addresses() == ["h:1", "h:2", "h:3"] and r.worker_index() == 2


def test_simple_cluster_resolver():
    r = sx.cluster_resolver.SimpleClusterResolver(
        sx.cluster_resolver.ClusterSpec({"worker": ["a:1", "b:2"]}), task_type="worker", task_id=0)
    assert r.worker_addresses() == ["a:1", "b:2"] and r.worker_index() == 0 and r.master() == "a:1"


@pytest.mark.parametrize("config,words", [
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
    ({"cluster": {"worker": ["a:1", "b:2"]}}, "no task for this process"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker"}}, "no index"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}, "out of range"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": -1}}, "out of range"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "evaluator", "index": 0}}, "not a job of the cluster"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": "0"}}, "not an integer"),
    ({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}, "must list its task addresses"),
    ({"cluster": {"worker": ["a1"]}, "task": {"type": "worker", "index": 0}}, "is not \"host:port\""),
], ids=["json", "not-object", "no-task", "no-index", "index-too-big", "index-negative", "unknown-type",
        "index-string", "job-not-list", "bad-address"])
def test_malformed_tf_config_is_rejected_clearly(monkeypatch, config, words):
    set_tf_config(monkeypatch, config)
    with pytest.raises(ValueError) as err:
        line = here(); sx.cluster_resolver.TFConfigClusterResolver()  # noqa: E702
    assert_names_this_line(err, line)
    assert words in str(err.value)
    assert isinstance(err.value, sx.cluster_resolver.ClusterConfigError)
    with pytest.raises(ValueError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702
    assert_names_this_line(err, line)


def test_ps_task_runs_no_replicas(monkeypatch):
    set_tf_config(monkeypatch, {"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 0}})
    with pytest.raises(ValueError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702
    assert_names_this_line(err, line)
    assert "does not take part" in str(err.value)


def test_joining_a_cluster_after_jax_started_is_refused(monkeypatch):
    # Intent: jax.distributed must start before JAX's backend; in this process it already has.
    set_tf_config(monkeypatch, {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                "task": {"type": "worker", "index": 0}})
    jax.devices()
    with pytest.raises(RuntimeError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702
    assert_names_this_line(err, line)
    assert "before any other JAX call" in str(err.value)


def test_liveness_probe_tells_live_from_dead_workers():
    # Intent: the survivor's way of naming a lost worker: a live worker answers a ping on its
    # own address; nothing listening means its process is gone.
    from multi_worker_launch import free_ports
    from strategax.cluster.runtime import LivenessListener, WorkerRuntime, probe

    live, dead, me = (f"127.0.0.1:{p}" for p in free_ports(3))
    LivenessListener(live)
    assert probe(live, ping=True) == "alive"
    assert probe(dead, ping=True) == "dead"
    runtime = WorkerRuntime.__new__(WorkerRuntime)
    runtime.addresses, runtime.index = [me, live, dead], 0
    assert runtime.find_lost(attempts=1) == ([2], [])
    message, lost = runtime._lost_message("a collective failed")
    assert lost == [2] and f"worker 2 (worker, task index 2, {dead}) was lost" in message
