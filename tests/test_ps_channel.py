"""The direct channels of a parameter-server job (strategax/cluster/channel.py):
steps scheduled through them train to plain JAX's numbers (each step's loss and the final
parameters, a 32 KB variable among them: more than one socket write), only a peer with the job's
key is answered, answers come back in order, a closed peer ends a blocked read at once, and a
worker whose channel breaks (its process still alive) is replaced with its steps run once."""
import logging
import threading
import time
from multiprocessing.connection import AuthenticationError

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import strategax as sx
from parameter_servers import TF_CONFIG, counting_steps, server_of, shared
from test_ps_faults import wait_for
from strategax.cluster import channel

RNG = np.random.default_rng(3)
INIT = {"w1": (RNG.normal(size=(64, 128)) * 0.1).astype(np.float32), "b1": np.zeros(128, np.float32),
        "w2": (RNG.normal(size=(128, 10)) * 0.1).astype(np.float32), "b2": np.zeros(10, np.float32)}
STEPS = 12
XS = RNG.normal(size=(STEPS, 16, 64)).astype(np.float32)
YS = RNG.integers(0, 10, size=(STEPS, 16)).astype(np.int32)


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ params["w2"] + params["b2"], y))


def plain_jax():
    """The same SGD steps on one device: each step's loss, and the final parameters."""
    params = {k: jnp.asarray(v) for k, v in INIT.items()}
    losses = []
    for x, y in zip(XS, YS):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        losses.append(float(loss))
    return losses, params


def test_steps_through_the_channels_match_plain_jax(ray_cluster):
    # Intent: 12 SGD steps of an MLP scheduled at once on 1 worker (so they run in order) with
    # its variables on 2 servers round-robin: each step's RemoteValue is plain JAX's loss, the
    # servers end with plain JAX's parameters (float32 tolerance).
    want_losses, want_params = plain_jax()
    strategy = shared("TF_CONFIG: 1 worker, 2 ps", tf_config=TF_CONFIG)
    strategy._placed = 0
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        params = {k: sx.Variable(v, name=k) for k, v in INIT.items()}
        optimizer = sx.Optimizer(optax.sgd(0.1))
    assert [server_of(params[k]) for k in INIT] == [0, 1, 0, 1]

    @strategy.function
    def step(x, y):
        def replica():
            loss, grads = jax.value_and_grad(loss_fn)({k: v.read_value() for k, v in params.items()}, x, y)
            optimizer.apply_gradients([(grads[k], params[k]) for k in params])
            return loss
        return strategy.reduce("MEAN", strategy.run(replica), axis=None)

    values = [coordinator.schedule(step, args=(x, y)) for x, y in zip(XS, YS)]
    coordinator.join()
    np.testing.assert_allclose([float(v.fetch()) for v in values], want_losses, rtol=1e-5, atol=1e-6)
    for k in INIT:
        np.testing.assert_allclose(params[k].numpy(), np.asarray(want_params[k]), rtol=1e-5, atol=1e-6)


def _serving(handle):
    """A listener with a fresh key answering through `handle`: (its address, the key, the listener)."""
    key = np.random.default_rng().bytes(32)
    listener = channel.listen(key)
    channel.serve(listener, handle, "test-channel")
    return listener.address, key, listener


def test_answers_in_order_and_only_to_the_key():
    # Intent: five requests sent before any answer is read come back in order (each the
    # request doubled, 40 KB: more than one write); a client with another key is refused and
    # the server still answers the right one afterwards.
    address, key, listener = _serving(lambda payload: payload * 2)
    try:
        with pytest.raises(AuthenticationError):
            channel.connect(address, b"not the key" * 3)
        conn = channel.connect(address, key)
        payloads = [bytes([i]) * 20000 for i in range(5)]
        for p in payloads:
            conn.send_bytes(p)
        assert [conn.recv_bytes() for _ in payloads] == [p * 2 for p in payloads]
        assert channel.request(conn, b"ab", timeout=60.0) == b"abab"
        channel.close(conn)
    finally:
        listener.close()


def test_a_closed_channel_ends_a_blocked_read():
    # Intent: a reader blocked on an answer that never comes gets EOFError/OSError as soon as
    # its channel is closed (what stops a coordinator's thread at shutdown), and a request
    # with a timeout to a silent server raises TimeoutError instead of hanging.
    release = threading.Event()

    def silent(payload):
        release.wait(60.0)
        return payload

    address, key, listener = _serving(silent)
    try:
        conn = channel.connect(address, key)
        with pytest.raises(TimeoutError):
            channel.request(conn, b"x", timeout=0.2)
        outcome = []

        def read():
            try:
                conn.recv_bytes()
                outcome.append("answered")
            except (EOFError, OSError) as e:
                outcome.append(type(e).__name__)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(0.1)  # (let it block; the outcome is the same if it had not yet)
        channel.close(conn)
        reader.join(30.0)
        assert outcome and outcome[0] != "answered", outcome
    finally:
        release.set()
        listener.close()


def test_a_worker_whose_channel_breaks_is_replaced(ray_cluster, monkeypatch, caplog):
    # Intent: while 20 steps (each adds one_hot(i) to `hits`) are in flight, the coordinator's
    # channel to worker 1 is closed with the worker's process alive: join() returns, every step
    # ran exactly once (hits all ones, as numpy computes it), worker 1 becomes a new process
    # (its first start again fails, injected: it is tried again, and the warning says why), and
    # the next round runs on the two workers exactly once too.
    steps = 20
    strategy = shared("2 workers, 1 ps", 2, 1)
    real_restart, failed = strategy._cluster.restart_worker, []

    def restart_failing_once(index):
        if not failed:
            failed.append(index)
            raise RuntimeError("a busy node (injected)")
        return real_restart(index)

    monkeypatch.setattr(strategy._cluster, "restart_worker", restart_failing_once)
    caplog.set_level(logging.WARNING, logger="strategax")
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    hits, step = counting_steps(strategy, steps, 0.1)  # steps in flight when the channel breaks

    before = strategy._cluster.worker_pids[1]
    rescheduled = coordinator._rescheduled
    for i in range(steps):
        coordinator.schedule(step, args=(np.int32(i),))
    wait_for(lambda: int(hits.numpy().sum()) >= 2, "the first steps")
    channel.close(strategy._cluster.channels[1])
    coordinator.join()
    np.testing.assert_array_equal(hits.numpy(), np.ones(steps, np.int32))
    assert coordinator._rescheduled > rescheduled  # worker 1's steps in flight ran again
    try:
        wait_for(lambda: strategy._cluster.worker_pids[1] != before, "worker 1 to start again", 300.0)
    except AssertionError as e:
        raise AssertionError(f"{e}; strategax's warnings: {caplog.text}") from None
    assert failed == [1] and "could not be started again (attempt 1 of 3): RuntimeError: a busy node" in caplog.text
    for i in range(steps):
        coordinator.schedule(step, args=(np.int32(i),))
    coordinator.join()
    np.testing.assert_array_equal(hits.numpy(), np.full(steps, 2, np.int32))
