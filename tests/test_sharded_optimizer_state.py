"""What surrounds sx.Optimizer(shard_state=True): checkpoints hold whole slots, so sharded and
unsharded optimizers and 8 and 4 replicas restore each other's checkpoints and continue to the
numbers of one-device optax; dynamic loss scaling skips a non-finite step on every shard;
OneDeviceStrategy ignores the option; an update that is not element-wise, and a strategy that
keeps variables its own way, are refused at the user's line."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import strategax as sx

STEPS, BATCH, LR = 6, 16, 1e-2
NAMES = ("w1", "b1", "w2")


def init_params():
    rng = np.random.default_rng(0)
    return {"w1": rng.normal(size=(5, 7)).astype(np.float32) * 0.4, "b1": np.zeros(7, np.float32),
            "w2": rng.normal(size=(7, 2)).astype(np.float32) * 0.3}


def loss_fn(params, x, y):  # per example
    return jnp.sum((jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] - y) ** 2, axis=-1)


def batches():
    rng = np.random.default_rng(1)
    return [(rng.normal(size=(BATCH, 5)).astype(np.float32), rng.normal(size=(BATCH, 2)).astype(np.float32))
            for _ in range(STEPS)]


def reference(steps):
    """One device, plain optax: (params, Adam's mu and nu) after each step of `steps`."""
    params, tx = init_params(), optax.adam(LR)
    state, out = tx.init(params), []

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(lambda p: jnp.mean(loss_fn(p, x, y)))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for x, y in steps:
        params, state = step(params, state, x, y)
        out.append((params, state[0].mu, state[0].nu))
    return out


@pytest.fixture(scope="module")
def ref():
    return reference(batches())


def trainer(strategy, shard_state, loss_scale=None):
    with strategy.scope():
        variables = {k: sx.Variable(v, name=k) for k, v in init_params().items()}
        opt = sx.Optimizer(optax.adam(LR), shard_state=shard_state, loss_scale=loss_scale)

    @strategy.function
    def step(x, y):
        def replica(x, y):
            def loss(values):
                total = jnp.sum(loss_fn(values, x, y)) / BATCH
                return opt.get_scaled_loss(total) if loss_scale else total
            grads = jax.grad(loss)({k: variables[k].read_value() for k in NAMES})
            if loss_scale:
                grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients([(grads[k], variables[k]) for k in NAMES])
        strategy.run(replica, args=(x, y))
    return variables, opt, step


def train(strategy, step, data):
    for x, y in strategy.experimental_distribute_dataset(data):
        step(x, y)


def assert_state(variables, opt, want):
    params, mu, nu = want
    tol = dict(rtol=1e-5, atol=1e-6)
    for k in NAMES:
        np.testing.assert_allclose(variables[k].numpy(), params[k], err_msg=k, **tol)
    slots = {(path[-1], v.name): s.numpy() for v, path, s in opt.slot_variables()}
    for k in NAMES:
        np.testing.assert_allclose(slots[("mu", k)], mu[k], err_msg=f"mu {k}", **tol)
        np.testing.assert_allclose(slots[("nu", k)], nu[k], err_msg=f"nu {k}", **tol)


def strategy_of(n):
    return sx.MirroredStrategy(jax.devices()[:n])


@pytest.mark.filterwarnings("ignore:Sharding info not provided")  # orbax reading the file without a target
@pytest.mark.parametrize("saved, restored", [((8, True), (8, False)), ((8, False), (4, True)), ((8, True), (4, True))],
                         ids=["sharded8-to-unsharded8", "unsharded8-to-sharded4", "sharded8-to-sharded4"])
def test_checkpoint_round_trips_continue_to_one_device_numbers(tmp_path, ref, saved, restored):
    # Intent: 3 steps, save, restore into fresh variables and optimizer of the other kind or
    # replica count, 3 more steps: the one-device optax numbers after step 3 and step 6.
    data = batches()
    strategy = strategy_of(saved[0])
    variables, opt, step = trainer(strategy, saved[1])
    train(strategy, step, data[:3])
    assert_state(variables, opt, ref[2])
    path = sx.Checkpoint(params=variables, optimizer=opt).save(str(tmp_path))
    # orbax alone reads whole slots, shaped like their parameters
    stored = ocp.PyTreeCheckpointer().restore(path)
    flat = {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(stored)[0]}
    for k in NAMES:
        mu = [v for p, v in flat.items() if f"'{k}'" in p and "mu" in p]
        assert len(mu) == 1 and mu[0].shape == init_params()[k].shape, flat.keys()
        np.testing.assert_allclose(mu[0], ref[2][1][k], rtol=1e-5, atol=1e-6)

    strategy = strategy_of(restored[0])
    variables, opt, step = trainer(strategy, restored[1])
    sx.Checkpoint(params=variables, optimizer=opt).restore(path)
    train(strategy, step, data[3:])
    assert opt.shard_state == restored[1]
    assert_state(variables, opt, ref[5])


def test_restore_into_existing_sharded_slots(tmp_path, ref):
    # Intent: a checkpoint restored into an optimizer whose sharded slots exist already (it has
    # trained on) writes every piece: training continues from the saved state.
    data = batches()
    strategy = strategy_of(8)
    variables, opt, step = trainer(strategy, True)
    train(strategy, step, data[:3])
    ckpt = sx.Checkpoint(params=variables, optimizer=opt)
    path = ckpt.save(str(tmp_path))
    train(strategy, step, data[:2])  # moves away
    ckpt.restore(path)
    assert_state(variables, opt, ref[2])
    train(strategy, step, data[3:])
    assert_state(variables, opt, ref[5])


def test_loss_scale_skips_a_non_finite_step_on_every_shard(ref):
    # Intent: dynamic loss scaling, a step whose gradient is inf on one replica's rows only (the
    # shard of another replica sees finite pieces): every shard skips it, the scale halves; the
    # other steps are one-device optax's.
    data = batches()
    bad = (data[1][0].copy(), data[1][1])
    bad[0][-1, 0] = np.inf  # replica 7's row
    strategy = strategy_of(8)
    variables, opt, step = trainer(strategy, True, loss_scale="dynamic")
    train(strategy, step, [data[0], bad, data[1], data[2]])
    assert float(opt.loss_scale) == 2.0 ** 14
    assert int(opt.iterations.numpy()) == 4  # TensorFlow counts a skipped step too
    assert_state(variables, opt, ref[2])


def test_one_device_strategy_ignores_shard_state():
    strategy = sx.OneDeviceStrategy(jax.devices()[0])
    variables, opt, step = trainer(strategy, True)
    train(strategy, step, batches()[:1])
    assert not opt.shard_state
    assert all(not isinstance(s, sx.SyncOnReadVariable) for _, _, s in opt.slot_variables())
    want = reference(batches()[:1])[0]
    assert_state(variables, opt, want)


def test_update_that_is_not_element_wise_is_refused_at_the_users_line():
    # Intent: clip_by_global_norm needs the whole gradient: on 1/8 of it it would differ, so
    # the first step raises (naming the op and the fix), at the user's apply_gradients line.
    strategy = strategy_of(8)
    with strategy.scope():
        w = sx.Variable(np.ones((4, 3), np.float32), name="w")
        opt = sx.Optimizer(optax.chain(optax.clip_by_global_norm(1.0), optax.adam(LR)), shard_state=True)

    @strategy.function
    def step(x):
        def replica(x):
            g = jax.grad(lambda v: jnp.sum(x @ v))(w.read_value())
            opt.apply_gradients([(g, w)])  # the line named
        strategy.run(replica, args=(x,))
    x = next(iter(strategy.experimental_distribute_dataset([np.ones((8, 4), np.float32)])))
    with pytest.raises(sx.DistributionValueError, match=r"combines elements \(reduce_sum\)") as info:
        step(x)
    assert "test_sharded_optimizer_state.py" in str(info.value) and "shard_state=False" in str(info.value)


def test_central_storage_refuses_shard_state():
    with sx.CentralStorageStrategy(jax.devices()[:2]).scope():
        with pytest.raises(sx.DistributionValueError, match="MirroredStrategy"):
            sx.Optimizer(optax.adam(LR), shard_state=True)
