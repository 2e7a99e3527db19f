"""sx.Optimizer(shard_state=True) under MultiWorkerMirroredStrategy: 2 workers x 2 devices
(4 replicas) hold each slot 1/4 per replica and end 4 Adam steps of the MLP with one-device
optax's parameters and slots; the checkpoint they write (whole slots) restores into an
unsharded optimizer on one process of 8 replicas."""
import sys
from pathlib import Path

import jax
import numpy as np
import optax

import strategax as sx

from multi_worker_launch import Job

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from mlp import TX, data, init_params, loss_fn, make_variable_training  # noqa: E402

WORKER = Path(__file__).resolve().parent / "workers" / "zero_worker.py"
STEPS = 4


def reference():
    """One device, plain optax: parameters and Adam's mu and nu after STEPS steps."""
    x, y = data(STEPS)
    params, state = init_params(), TX.init(init_params())

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = TX.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for i in range(STEPS):
        params, state = step(params, state, x[i], y[i])
    return params, state[0].mu, state[0].nu


def test_two_workers_shard_slots_over_all_replicas_and_match_one_device(tmp_path):
    # Intent: the slots are split over the 4 replicas of both workers (a piece of ceil(size/4)
    # per replica, 2 here on each worker), and both workers end with one-device optax's numbers.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with Job(tmp_path, 2, 2, [str(STEPS), str(ckpt)], script=WORKER) as job:
        assert job.wait(timeout=180) == [0, 0], job.logs()
        results = [job.result(0), job.result(1)]
    params, mu, nu = reference()
    for r in results:
        assert r["replicas"] == 4 and r["shard_state"]
        for k, want in params.items():
            np.testing.assert_allclose(np.asarray(r["params"][k]), want, rtol=2e-5, atol=2e-6, err_msg=k)
            np.testing.assert_allclose(np.asarray(r["slots"][f"mu/{k}"]), mu[k], rtol=2e-5, atol=2e-6)
            np.testing.assert_allclose(np.asarray(r["slots"][f"nu/{k}"]), nu[k], rtol=2e-5, atol=2e-6)
            assert r["pieces"][f"mu/{k}"] == [[-(-want.size // 4)]] * 2  # this worker's 2 replicas
    # the checkpoint holds whole slots: an unsharded optimizer on 8 replicas restores them
    strategy = sx.MirroredStrategy(jax.devices()[:8])
    variables, optimizer, _, _ = make_variable_training(strategy)
    sx.Checkpoint(params=variables, optimizer=optimizer).restore(sx.latest_checkpoint(str(ckpt)))
    for k, want in params.items():
        np.testing.assert_allclose(variables[k].numpy(), want, rtol=2e-5, atol=2e-6, err_msg=k)
