"""Variable and merge_call misuse fails at trace time, naming this file and line and the fix."""

import jax.numpy as jnp
import pytest

import strategax as sx
from conftest import assert_names_this_line, here


def strategy2():
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])




def rid():
    return sx.get_replica_context().replica_id_in_sync_group.astype(jnp.float32)


def test_none_aggregation_update_with_per_replica_value():
    # Intent: the copies of a mirrored variable would drift (TF allows it silently); the line is named.
    st = strategy2()
    with st.scope():
        v = sx.Variable(1.0)
    line = here() + 2
    def fn():
        v.assign_add(rid())
    with pytest.raises(ValueError) as err:
        st.run(fn)
    assert_names_this_line(err, line)
    assert isinstance(err.value, sx.DistributionValueError)
    st.run(lambda: v.assign_add(2.0))  # a value identical on every replica is fine
    assert [float(c) for c in v.values] == [3.0, 3.0]


@pytest.mark.parametrize("kind", [sx.MirroredVariable, sx.SyncOnReadVariable])
def test_distributed_variable_made_outside_a_scope(kind):
    # Intent: a mirrored or sync-on-read variable belongs to a strategy; made directly outside any
    # scope it would have no replicas (a SUM sync-on-read assign divided by None), so it is a
    # located error at its creation, and sx.Variable there stays a plain variable (API.md).
    with pytest.raises(RuntimeError, match="outside a strategy's scope") as err:
        line = here(); kind(1.0, aggregation="sum")  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)
    assert isinstance(err.value, sx.DistributionRuntimeError)
    plain = sx.Variable(1.0, aggregation="sum")
    assert type(plain) is sx.Variable
    plain.assign(4.0)
    assert float(plain.read_value()) == 4.0


def test_assign_add_sum_sync_on_read_in_cross_replica_context():
    # Intent: TF 2.21 raises ValueError here too (SUM has no per-copy meaning for a delta).
    st = strategy2()
    with st.scope():
        v = sx.Variable(1.0, synchronization=sx.VariableSynchronization.ON_READ, aggregation=sx.VariableAggregation.SUM)
        with pytest.raises(ValueError) as err:
            line = here(); v.assign_add(1.0)  # noqa: E702  here() names the line of the call
        assert_names_this_line(err, line)
        f = st.function(lambda: v.assign_sub(1.0))
        with pytest.raises(ValueError) as err:
            line = here(); f()  # noqa: E702  here() names the line of the call
    assert [float(c) for c in v.values] == [1.0, 1.0]


def test_per_replica_value_passed_to_update():
    # Intent: extended.update needs one value for every copy; a PerReplica one raises.
    st = strategy2()
    with st.scope():
        v = sx.Variable(1.0)
    pr = st.experimental_distribute_values_from_function(lambda ctx: float(ctx.replica_id_in_sync_group))

    def merge_fn(strategy, g):
        line[0] = here() + 1
        return strategy.extended.update(v, lambda var, x: var.assign(x), args=(g,))
    line = [0]
    with pytest.raises(ValueError) as err:
        st.run(lambda: sx.get_replica_context().merge_call(merge_fn, args=(rid(),)))
    assert_names_this_line(err, line[0])
    with st.scope(), pytest.raises(ValueError) as err:
        ln = here(); st.extended.update(v, lambda var, x: var.assign(x), args=(pr,))  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, ln)


def test_per_replica_value_assigned_in_cross_replica_context():
    # Intent: TF gives copy i component i (the copies differ); strategax raises.
    st = strategy2()
    with st.scope():
        v = sx.Variable(1.0)
    pr = st.experimental_distribute_values_from_function(lambda ctx: float(ctx.replica_id_in_sync_group))
    with st.scope(), pytest.raises(ValueError) as err:
        line = here(); v.assign(pr)  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_nested_merge_call():
    # Intent: merge_call inside merge_fn is an error (TF fails with an AttributeError on None).
    st = strategy2()

    def fn():
        ctx = sx.get_replica_context()

        def outer(strategy):
            line[0] = here() + 1
            return ctx.merge_call(lambda s: 1.0)
        return ctx.merge_call(outer)
    line = [0]
    with pytest.raises(RuntimeError) as err:
        st.run(fn)
    assert_names_this_line(err, line[0])


def test_variable_from_another_strategy():
    # Intent: a variable lives on its own strategy's devices; using it under another raises.
    a, b = strategy2(), sx.MirroredStrategy(["CPU:2", "CPU:3"])
    with a.scope():
        v = sx.Variable(1.0)
    line = here() + 2
    def fn():
        return v.read_value() + 1.0
    with pytest.raises(ValueError) as err:
        b.run(fn)
    assert_names_this_line(err, line)


def test_sync_on_read_none_read_in_cross_replica_context():
    # Intent: TF 2.21 raises ValueError: no rule combines the copies.
    st = strategy2()
    with st.scope():
        v = sx.Variable(1.0, synchronization="ON_READ", aggregation="NONE")
        with pytest.raises(ValueError) as err:
            line = here(); v.read_value()  # noqa: E702  here() names the line of the call
    assert_names_this_line(err, line)


def test_merge_fn_returning_a_per_replica_value_from_outside():
    # Intent: merge_fn's PerReplica results give replica i component i (API.md, TF 2.21); one
    # that this program did not compute (captured from outside) cannot, and raises at the call.
    st = strategy2()
    outside = st.experimental_distribute_values_from_function(lambda ctx: float(ctx.replica_id_in_sync_group))
    line = here() + 2
    def fn():
        return sx.get_replica_context().merge_call(lambda s: outside)
    with pytest.raises(RuntimeError) as err:
        st.run(fn)
    assert_names_this_line(err, line)
