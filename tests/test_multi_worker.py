"""MultiWorkerMirroredStrategy: real worker processes on loopback (jax.distributed + gloo),
faults, and TF_CONFIG parsing."""
import json
import socket
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
@pytest.mark.parametrize("workers", [2, 4], ids=["2x2", "4x2"])
def test_workers_of_two_devices_train_like_one_process_and_one_device(tmp_path, workers):
    # Intent: W processes x 2 devices (2W replicas over gloo) give the losses and parameters of
    # 1 process x 2W devices and of plain JAX on one device (rtol 1e-5); each worker sees its
    # 2 replicas. 4 x 2 is the scale check (issue 17): it must stay small enough for CI.
    replicas = 2 * workers
    with Job(tmp_path, num_workers=workers, devices=2, args=[str(STEPS)]) as job:
        codes = job.wait(timeout=150)
        assert codes == [0] * workers, job.logs()
        results = [job.result(w) for w in range(workers)]
    ref_losses, ref_params = reference_training(STEPS)
    one_losses, one_params = train_in_process(sx.MirroredStrategy(jax.devices()[:replicas]), STEPS)
    np.testing.assert_allclose(one_losses, ref_losses, rtol=1e-5)
    for w, r in enumerate(results):
        assert (r["worker"], r["task_type"], r["replicas"], r["local_results"]) == (w, "worker", replicas, 2)
        assert r["input_contexts"] == [[workers, w, replicas]]  # one input pipeline per worker
        assert (r["worker_devices"], r["should_checkpoint"]) == (2, w == 0)  # only the chief saves
        # the pipeline's 3 elements dealt to this worker's 2 replicas; the last step's second
        # replica gets an empty batch (None: no row)
        assert r["dealt"] == [[10 * w, 10 * w + 1], [10 * w + 2, None]]
        np.testing.assert_allclose(r["losses"], one_losses, rtol=1e-5)
        np.testing.assert_allclose(r["losses"], ref_losses, rtol=1e-5)
        for k in ref_params:
            np.testing.assert_allclose(np.asarray(r["params"][k]), one_params[k], rtol=1e-5, atol=1e-6)
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


def test_a_resolver_without_a_task_index_is_a_named_error():
    # Intent: a ClusterResolver subclass that names its task type but no index (task_id None, the
    # base class's default) is a located ClusterConfigError, not a TypeError from `offset + None`.
    class Resolver(sx.cluster_resolver.ClusterResolver):
        task_type = "worker"

        def cluster_spec(self):
            return sx.cluster_resolver.ClusterSpec({"worker": ["a:1", "b:2"]})

    with pytest.raises(sx.cluster_resolver.ClusterConfigError, match="task_id is None") as err:
        line = here(); sx.MultiWorkerMirroredStrategy(Resolver())  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


@pytest.mark.parametrize("config,words", [
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
    ({"cluster": {"worker": ["a:1", "b:2"]}}, "no task for this process"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker"}}, "no index"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}},
     "task.index is 2, which is out of range"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": -1}}, "out of range"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "evaluator", "index": 0}}, "not a job of the cluster"),
    ({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": "0"}},
     "task.index is '0', which is not an integer"),
    ({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}, "must list its task addresses"),
    ({"cluster": {"worker": ["a1"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[0] is 'a1', which is not \"host:port\""),
    ({"cluster": {"worker": ["a:1", "b:x2"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[1] is 'b:x2': its port 'x2' is not a number"),
    ({"cluster": {"worker": ["a:1", "b:99999"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[1] is 'b:99999': port 99999 is out of range"),
    ({"cluster": {"worker": ["a:1", "b:0"]}, "task": {"type": "worker", "index": 0}}, "port 0 is out of range"),
    ({"cluster": {"worker": [":1", "b:2"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[0] is ':1', which is not \"host:port\""),
    ({"cluster": {"worker": ["::1:5", "b:2"]}, "task": {"type": "worker", "index": 0}}, "an IPv6 host needs brackets"),
    ({"cluster": {"worker": ["a:1", "A:1"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[1] and TF_CONFIG cluster.worker[0] have the same address"),
    ({"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[0] and TF_CONFIG cluster.chief[0] have the same address"),
    ({"cluster": {"worker": ["localhost:1", "127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}},
     "cluster.worker[1] and TF_CONFIG cluster.worker[0] have the same address"),
    ({"cluster": {"worker": {"0": "a:1", "x": "b:2"}}, "task": {"type": "worker", "index": 0}},
     "cluster.worker has the task key 'x', which is not a task index"),
    ({"cluster": {"worker": {"0": "a:1", "-1": "b:2"}}, "task": {"type": "worker", "index": 0}}, "task key '-1'"),
    ({"cluster": {"worker": {"1": "a:1", "01": "b:2"}}, "task": {"type": "worker", "index": 1}},
     "names task 1 twice (key '01')"),
    ({"cluster": {"worker": {"0": "a:1", "2": "b:2"}}, "task": {"type": "worker", "index": 1}},
     "whose tasks are [0, 2]"),
    ("[" * 100000 + "]" * 100000, "nests more than 16 levels"),
], ids=["json", "not-object", "no-task", "no-index", "index-too-big", "index-negative", "unknown-type",
        "index-string", "job-not-list", "bad-address", "port-not-number", "port-too-big", "port-zero", "no-host",
        "ipv6-without-brackets", "duplicate-address", "duplicate-across-jobs", "duplicate-loopback", "key-not-integer",
        "key-negative", "key-twice", "index-not-a-task", "deep-json"])
def test_malformed_tf_config_is_rejected_clearly(monkeypatch, config, words):
    set_tf_config(monkeypatch, config)
    with pytest.raises(ValueError) as err:
        line = here(); sx.cluster_resolver.TFConfigClusterResolver()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert words in str(err.value)
    assert isinstance(err.value, sx.cluster_resolver.ClusterConfigError)
    with pytest.raises(ValueError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_sparse_task_keys_are_task_indices_not_text(monkeypatch):
    # Intent: JSON keys are strings; "10" sorts before "2" as text. TensorFlow reads them as
    # integers (recorded by running it: task 2 resolves to "h:2"), and so do we.
    set_tf_config(monkeypatch, {"cluster": {"worker": {"0": "h:1", "2": "h:2", "10": "h:3"}},
                                "task": {"type": "worker", "index": 2}})
    r = sx.cluster_resolver.TFConfigClusterResolver()
    assert r.master() == "h:2" and r.cluster_spec().task_indices("worker") == [0, 2, 10]
    assert r.cluster_spec().as_dict() == {"worker": {0: "h:1", 2: "h:2", 10: "h:3"}}
    with pytest.raises(ValueError) as err:  # MultiWorkerMirroredStrategy numbers workers 0..n-1
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "task indices [0, 2, 10]" in str(err.value)
    set_tf_config(monkeypatch, {"cluster": {"worker": {"1": "h:2", "0": "h:1"}},
                                "task": {"type": "worker", "index": 1}})
    r = sx.cluster_resolver.TFConfigClusterResolver()
    assert r.worker_addresses() == ["h:1", "h:2"] and r.worker_index() == 1


def test_ps_task_runs_no_replicas(monkeypatch):
    set_tf_config(monkeypatch, {"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 0}})
    with pytest.raises(ValueError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "does not take part" in str(err.value)


def test_joining_a_cluster_after_jax_started_is_refused(monkeypatch):
    # Intent: jax.distributed must start before JAX's backend; in this process it already has.
    set_tf_config(monkeypatch, {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                "task": {"type": "worker", "index": 0}})
    jax.devices()
    with pytest.raises(RuntimeError) as err:
        line = here(); sx.MultiWorkerMirroredStrategy()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "before any other JAX call" in str(err.value)


def test_liveness_probe_tells_live_from_dead_workers():
    # Intent: the survivor's way of naming a lost worker: a live worker answers a ping on its
    # own address; nothing listening means its process is gone.
    from multi_worker_launch import free_ports
    from strategax.cluster import Peers
    from strategax.cluster.liveness import Server, probe

    live, dead, me = (f"127.0.0.1:{p}" for p in free_ports(3))
    server = Server(live, lambda words: "alive 1" if words == ["ping"] else None)
    try:
        assert probe(live, ping=True) == "alive"
        assert probe(dead, ping=True) == "dead"
        peers = Peers.of([me, live, dead], 0)
        assert peers.find_lost(attempts=1) == ([2], [])
        message = peers.lost_message("a collective failed", [2])
        assert f"worker 2 (worker, task index 2, {dead}) was lost" in message
    finally:
        server.close()


def test_connections_that_never_speak_the_protocol_do_not_hide_a_live_worker():
    # Intent: idle connections, and ones that send something else, are dropped without an
    # answer and never delay a real ping (three idle connections used to make a live worker
    # look unresponsive). The server listens on the given host only.
    from multi_worker_launch import free_ports
    from strategax.cluster.liveness import IDLE_S, Server, probe, request

    address = f"127.0.0.2:{free_ports(1, '127.0.0.2')[0]}"
    server = Server(address, lambda words: "alive 1" if words == ["ping"] else None)
    idle = [socket.create_connection(("127.0.0.2", server.bound[1])) for _ in range(8)]
    try:
        assert server.bound[0] == "127.0.0.2"
        foreign = socket.create_connection(("127.0.0.2", server.bound[1]), timeout=5)
        foreign.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        for _ in range(3):  # served one at a time, 8 idle connections would take 8 s
            assert probe(address, ping=True, timeout=2.0) == "alive"
        assert foreign.recv(64) == b""  # closed, unanswered
        assert request(address, "hello 1") is None  # a line of the protocol it does not serve
        idle[0].settimeout(IDLE_S + 3)
        assert idle[0].recv(1) == b""  # an idle connection is dropped after IDLE_S
    finally:
        for s in idle:
            s.close()
        server.close()
