"""Updates from many workers at once are applied on the parameter servers atomically per
variable: none is lost (4 workers x 100 steps of assign_add(1) end at exactly 400), including
replica-context updates aggregated over each worker's 2 replicas first; reads inside a step
see the servers' current values; scheduling errors behave as TensorFlow's coordinator's."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import strategax as sx
from conftest import here
from parameter_servers import shared


STEPS = 4 * 100  # 100 a worker on average (each worker takes the next step as it is free)


@pytest.fixture(scope="module")
def strategy(ray_cluster):
    return shared("4 workers x 2 devices, 2 ps", 4, 2, devices_per_worker=2)


@pytest.fixture(scope="module")
def coordinator(strategy):
    return sx.experimental.coordinator.ClusterCoordinator(strategy)


def test_no_update_is_lost(strategy, coordinator):
    # Intent: STEPS steps on 4 workers: a cross-replica assign_add(1), a SUM-aggregated
    # mirrored variable and a sync-on-read SUM variable each updated by 1 on both replicas of
    # the running worker; the servers end at exactly STEPS, 2 * STEPS and 2 * STEPS (the count of steps
    # times what one step adds), whichever worker ran which step.
    with strategy.scope():
        counter = sx.Variable(0, dtype=jnp.int32, name="counter")
        summed = sx.Variable(0, dtype=jnp.int32, aggregation="sum", name="summed")
        local = sx.Variable(0, dtype=jnp.int32, synchronization="on_read", aggregation="sum", name="local")

    @strategy.function
    def step():
        counter.assign_add(1)

        def replica():
            summed.assign_add(1)
            local.assign_add(1)
        strategy.run(replica)

    values = [coordinator.schedule(step) for _ in range(STEPS)]
    coordinator.join()
    assert all(v.fetch() is None for v in values)
    assert (int(counter.numpy()), int(summed.numpy()), int(local.numpy())) == (STEPS, 2 * STEPS, 2 * STEPS)
    assert strategy.num_replicas_in_sync == 2


def test_reads_see_the_current_value(strategy, coordinator):
    # Intent: a step reads what the coordinator assigned just before it was scheduled, and an
    # assign inside a step replaces the value (an assign then an add: the add applies to it).
    with strategy.scope():
        w = sx.Variable(np.arange(4, dtype=np.float32), name="w")

    @strategy.function
    def read():
        return strategy.run(lambda: w.read_value() * 2)

    @strategy.function
    def reset_then_add():
        w.assign(jnp.full(4, 10.0))
        w.assign_add(jnp.ones(4))

    w.assign(np.full(4, 3.0, np.float32))
    got = coordinator.schedule(read).fetch()
    np.testing.assert_array_equal(np.asarray(got.values), np.full((2, 4), 6.0))
    coordinator.schedule(reset_then_add)
    coordinator.join()
    assert coordinator.done()
    np.testing.assert_array_equal(w.numpy(), np.full(4, 11.0))
    fetched = coordinator.fetch({"read": coordinator.schedule(read), "plain": 1})
    assert fetched["plain"] == 1 and isinstance(fetched["read"], sx.Mirrored)  # the same on both replicas
    np.testing.assert_array_equal(np.asarray(fetched["read"].values), np.full((2, 4), 22.0))


def test_a_failed_step_raises_at_join_and_cancels_the_queue(strategy, coordinator):
    # Intent: an error in a scheduled function comes back from join() as itself (type and
    # message); fetch() of its RemoteValue raises it too; join() clears it: later steps run.
    with strategy.scope():
        v = sx.Variable(0.0, name="v")

    def bad():
        raise ValueError("bad step")

    @strategy.function
    def good():
        v.assign_add(1.0)

    failing = coordinator.schedule(bad)
    with pytest.raises(ValueError, match="bad step"):
        coordinator.join()
    with pytest.raises(ValueError, match="bad step"):
        failing.fetch()
    coordinator.schedule(good)
    coordinator.join()
    assert float(v.numpy()) == 1.0


def test_steps_run_on_workers_only(strategy):
    # Intent: strategy.run on the coordinator raises at the user's line, saying to schedule it.
    line = here() + 2
    with pytest.raises(RuntimeError, match="schedule") as err:
        strategy.run(lambda: 1.0)
    assert f"test_ps_updates.py:{line}:" in str(err.value)


def test_variables_are_made_on_the_coordinator(strategy, coordinator):
    # Intent: a variable created inside a scheduled function fails that function with a fix.
    def make():
        sx.Variable(1.0)
    coordinator.schedule(make)
    with pytest.raises(RuntimeError, match="created inside a scheduled function"):
        coordinator.join()


def test_optimizer_slots_made_on_workers_reach_the_coordinator(strategy, coordinator):
    # Intent: the first steps create the momentum slot on a server (one, shared by the 4
    # workers) and the coordinator's optimizer adopts it; a second step function pickled after
    # that uses the same slot on every worker; every step is counted (8 + 8); the parameter
    # moved by at least one plain SGD step (its gradient is 1 at every step: loss = sum(w)).
    with strategy.scope():
        w = sx.Variable(np.zeros(3, np.float32), name="w_momentum")
        optimizer = sx.Optimizer(optax.sgd(0.1, momentum=0.9))

    def make_step():
        @strategy.function
        def step():
            def replica():
                grad = jax.grad(lambda v: jnp.sum(v))(w.read_value())
                optimizer.apply_gradients([(grad, w)])
            strategy.run(replica)
        return step

    first = make_step()
    for _ in range(8):
        coordinator.schedule(first)
    coordinator.join()
    slots = optimizer.slot_variables()
    assert [(v is w, path) for v, path, _ in slots] == [(True, ("0", "trace"))]
    second = make_step()
    for _ in range(8):
        coordinator.schedule(second)
    coordinator.join()
    assert optimizer.slot_variables() == slots
    assert int(optimizer.iterations.numpy()) == 16
    # each step adds at least -0.1 * 2 (the summed gradient of both replicas) to every element
    assert np.all(w.numpy() <= -0.2 * 16 + 1e-5)
