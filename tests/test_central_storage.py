"""CentralStorageStrategy: variables stored once on the parameter device, broadcast to the
compute replicas each step and their updates reduced back; numbers equal one-device JAX."""
import re

import jax
import numpy as np
import strategax as sx

from test_optimizer_training import NAMES, batches, init_params, make_trainer, reference_training

STEPS = 5


def train(strategy, steps=STEPS):
    variables, _, train_step = make_trainer(strategy, init_params())
    xs, ys = batches()
    losses = []
    batch = None
    for batch in strategy.experimental_distribute_dataset(list(zip(xs[:steps], ys[:steps]))):
        losses.append(float(train_step(*batch)))
    return variables, losses, train_step, batch


def test_central_storage_trains_like_one_device():
    # Intent: 4 compute replicas, parameters on CPU:0 (TensorFlow's default parameter device):
    # the losses and parameters of plain JAX + optax on one device, step by step.
    strategy = sx.CentralStorageStrategy(jax.devices()[:4])
    assert strategy.parameter_device == jax.devices("cpu")[0]
    assert strategy.extended.parameter_devices == (jax.devices("cpu")[0],)
    variables, losses, step, batch = train(strategy)
    ref_losses, history = reference_training()
    np.testing.assert_allclose(losses, ref_losses[:STEPS], rtol=1e-5)
    for k in NAMES:
        np.testing.assert_allclose(np.asarray(variables[k].read_value()), history[STEPS - 1][k], rtol=1e-5, atol=1e-6)
        # stored once, on the parameter device
        assert len(variables[k].values) == 1
        assert variables[k].values[0].device == strategy.parameter_device


def test_central_storage_ir_shows_broadcast_and_reduce():
    # Intent: the compiled step broadcasts each variable from the parameter replica and
    # reduces the updates back; both visible in the IR with their reasons.
    strategy = sx.CentralStorageStrategy(jax.devices()[:4])
    variables, _, step, batch = train(strategy, steps=1)
    text = step.ir(*batch)
    lines = text.splitlines()
    for k in NAMES:  # each parameter read by the replicas is broadcast from the parameter replica
        # (a variable's symbol is its name, suffixed when an earlier variable had that name)
        i = next(i for i, line in enumerate(lines) if re.search(rf'var = @{k}(_\d+)?, ctx = "replica"', line))
        assert 'sx.broadcast' in lines[i + 1] and 'source = 0, reason = "CentralStorage broadcast"' in lines[i + 1]
    # the four gradients' reductions feed the variables' updates: reduced to the parameter device
    # (fuse-collectives then packs them into one bucket, keeping each member's reason)
    assert text.count('"reduce to parameter device (StrategyExtended.batch_reduce_to)"') == len(NAMES)
    assert "parameter_replica = 0" in text


def test_parameter_device_outside_the_compute_devices():
    # Intent: compute on CPU:4-7, parameters on CPU:0; still the one-device numbers.
    strategy = sx.CentralStorageStrategy(jax.devices()[4:], parameter_device="CPU:0")
    variables, losses, _, _ = train(strategy, steps=3)
    ref_losses, history = reference_training()
    np.testing.assert_allclose(losses, ref_losses[:3], rtol=1e-5)
    for k in NAMES:
        assert variables[k].values[0].device == jax.devices()[0]
        np.testing.assert_allclose(np.asarray(variables[k].read_value()), history[2][k], rtol=1e-5, atol=1e-6)

