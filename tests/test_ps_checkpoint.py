"""Training on parameter servers with sharded variables gives plain JAX's numbers (one worker,
so the order of steps is known), optimizer slots made by the worker live on the servers and
reach the coordinator's optimizer, and a checkpoint of a ShardedVariable restores into a
differently sharded model and into a MirroredStrategy model."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import strategax as sx
from parameter_servers import TF_CONFIG, server_of, shared

RNG = np.random.default_rng(0)
INIT = {"emb": RNG.normal(size=(10, 4)).astype(np.float32), "w": RNG.normal(size=(4,)).astype(np.float32),
        "b": np.float32(0.5)}
BATCHES = [(RNG.integers(0, 10, size=(8, 3)).astype(np.int32), RNG.normal(size=(8,)).astype(np.float32))
           for _ in range(5)]


def loss_fn(params, ids, y):
    h = jnp.mean(params["emb"][ids], axis=1)
    return jnp.mean(jnp.square(h @ params["w"] + params["b"] - y))


def plain_jax():
    """The same 5 Adam steps on one device: parameters and optax state."""
    params = {k: jnp.asarray(v) for k, v in INIT.items()}
    tx = optax.adam(0.1)
    state = tx.init(params)
    for ids, y in BATCHES:
        grads = jax.grad(loss_fn)(params, ids, y)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state[0]


def model_values(model) -> dict:
    return {k: np.asarray(v.numpy()) for k, v in model.items()}


def test_sharded_training_slots_and_checkpoints(ray_cluster, tmp_path):
    # Intent: emb [10, 4] and w [4] are sharded in two over 2 servers, b is a scalar (never
    # sharded); 5 scheduled Adam steps give plain JAX's parameters and Adam moments (the
    # slots of each shard, concatenated, are the moments of the whole variable); the saved
    # model restores exactly into 3-way shards and into a MirroredStrategy's variables.
    want_params, want_state = plain_jax()
    strategy = shared("TF_CONFIG: 1 worker, 2 ps", tf_config=TF_CONFIG)
    strategy._partitioner = sx.experimental.partitioners.FixedShardsPartitioner(2)
    strategy._placed = 0
    coordinator = sx.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = {k: sx.Variable(v, name=k) for k, v in INIT.items()}
        optimizer = sx.Optimizer(optax.adam(0.1))
    assert [server_of(s) for s in model["emb"].variables] == [0, 1]

    @strategy.function
    def step(ids, y):
        def replica(ids, y):
            values = {k: v.read_value() for k, v in model.items()}
            grads = jax.grad(loss_fn)(values, ids, y)
            optimizer.apply_gradients([(grads[k], model[k]) for k in model])
        strategy.run(replica, args=(ids, y))

    for ids, y in BATCHES:
        coordinator.schedule(step, args=(ids, y))
    coordinator.join()
    for k in model:
        np.testing.assert_allclose(model[k].numpy(), want_params[k], rtol=2e-5, atol=1e-6, err_msg=k)
    assert int(optimizer.iterations.numpy()) == 5
    slots = {}
    for var, path, slot in optimizer.slot_variables():
        slots.setdefault((var.name.split("/part_")[0], path), []).append(np.asarray(slot.numpy()))
    for k in model:
        for moment in ("mu", "nu"):
            got = np.concatenate(slots[(k, ("0", moment))]) if k != "b" else slots[(k, ("0", moment))][0]
            np.testing.assert_allclose(got, getattr(want_state, moment)[k], rtol=2e-5, atol=1e-7,
                                       err_msg=f"{k} {moment}")

    saved = model_values(model)
    path = sx.Checkpoint(model=model).save(str(tmp_path / "ckpt"))

    strategy._partitioner = sx.experimental.partitioners.FixedShardsPartitioner(3)
    with strategy.scope():
        resharded = {k: sx.Variable(np.zeros_like(v), name=k) for k, v in INIT.items()}
    assert [tuple(s.shape) for s in resharded["emb"].variables] == [(4, 4), (3, 4), (3, 4)]
    sx.Checkpoint(model=resharded).restore(path)
    for k in saved:
        np.testing.assert_array_equal(resharded[k].numpy(), saved[k], err_msg=k)

    with pytest.raises(sx.CheckpointError, match="sharded"):
        sx.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "with_slots"))

    mirrored = sx.MirroredStrategy(["CPU:0", "CPU:1"])
    with mirrored.scope():
        plain = {k: sx.Variable(np.zeros_like(v), name=k) for k, v in INIT.items()}
    sx.Checkpoint(model=plain).restore(path)
    for k in saved:
        np.testing.assert_array_equal(plain[k].numpy(), saved[k], err_msg=k)
