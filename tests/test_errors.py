"""Misuse fails at trace time with an error that names this file and line and says the fix."""
import inspect

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here


def strategy2():
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])




def test_reduce_sum_of_non_distributed_value():
    # Intent: TF 2.21 raises for SUM of a plain tensor on several replicas.
    strategy = strategy2()
    with pytest.raises(ValueError) as err:
        line = here(); strategy.reduce("SUM", jnp.ones(3))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    np.testing.assert_array_equal(strategy.reduce("MEAN", jnp.ones(3)), jnp.ones(3))


def test_reduce_unknown_op():
    strategy = strategy2()
    values = strategy.experimental_distribute_values_from_function(lambda ctx: 1.0)
    with pytest.raises(ValueError) as err:
        line = here(); strategy.reduce("MAX", values)  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_per_replica_with_wrong_number_of_components():
    strategy = strategy2()
    bad = sx.PerReplica((jnp.ones(2), jnp.ones(2), jnp.ones(2)))
    with pytest.raises(ValueError) as err:
        line = here(); strategy.run(lambda x: x, args=(bad,))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "3 components" in str(err.value) and "2 replicas" in str(err.value)


def test_mismatched_pytree_structures_across_replicas():
    strategy = strategy2()
    with pytest.raises(TypeError) as err:
        line = here(); strategy.experimental_distribute_values_from_function(  # noqa: E702  here() names the line of the call
            lambda ctx: {"a": 1.0} if ctx.replica_id_in_sync_group == 0 else {"b": 1.0})
    assert_names_this_line(err, line)
    bad = sx.PerReplica(({"a": jnp.ones(2)}, {"b": jnp.ones(2)}))
    with pytest.raises(TypeError) as err:
        line = here(); strategy.run(lambda x: x, args=(bad,))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_reduce_in_replica_context():
    strategy = strategy2()

    def replica_fn():
        return strategy.reduce("SUM", jnp.ones(()))  # the line below names this one

    line = inspect.getsourcelines(replica_fn)[1] + 1
    with pytest.raises(RuntimeError) as err:
        strategy.run(replica_fn)
    assert_names_this_line(err, line)


def test_per_replica_is_not_an_array():
    strategy = strategy2()
    values = strategy.experimental_distribute_values_from_function(lambda ctx: 1.0)
    with pytest.raises(ValueError) as err:
        line = here(); jnp.asarray(values)  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert "experimental_local_results" in str(err.value)


def test_per_replica_used_as_one_value_inside_function():
    strategy = strategy2()
    values = strategy.experimental_distribute_values_from_function(lambda ctx: 1.0)

    @strategy.function
    def step(v):
        return v * 2.0  # a PerReplica in cross-replica code

    line = inspect.getsourcelines(step.__wrapped__)[1] + 2
    with pytest.raises(ValueError) as err:
        step(values)
    assert_names_this_line(err, line)


def test_unknown_device_string():
    with pytest.raises(ValueError) as err:
        line = here(); sx.MirroredStrategy(["GPU:7"])  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    with pytest.raises(ValueError):
        sx.MirroredStrategy(["CPU:0", "/device:CPU:0"])
