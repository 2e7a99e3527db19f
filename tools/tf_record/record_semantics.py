"""Record TensorFlow's semantics where strategax's own tests did not reach (issue 14):
context functions, distributed values captured by closure in a tf.function, merge_call's
regrouping, StrategyExtended.update and variable assign checks, per-replica values whose
components differ in shape ("ragged"), and bad values (out-of-range axes, odd components).

Writes tests/data/tf/semantics.json via run_all.sh.  Each scenario runs in its own
process: ``python record_semantics.py --scenario NAME``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, mirrored, enc, err, attempt, local, type_tree, main  # noqa: E402


def _values_lib():
    from tensorflow.python.distribute import values as values_lib
    return values_lib


def _per_replica(tf, st, fn):
    """A PerReplica whose component i is fn(i) (experimental_distribute_values_from_function)."""
    return st.experimental_distribute_values_from_function(
        lambda ctx: fn(ctx.replica_id_in_sync_group))


def _get_cross_replica_context():
    """TensorFlow keeps get_cross_replica_context out of tf.distribute (distribute_lib has it)."""
    from tensorflow.python.distribute import distribute_lib
    return distribute_lib.get_cross_replica_context()


def _name(x):
    return None if x is None else type(x).__name__


# ---------------------------------------------------------------- contexts

@scenario("contexts", devices=(2,))
def contexts(tf, n):
    """Context functions outside any scope, in scope(), in run; a scope object entered again
    after it exits; merge_call on the default replica context; merge_call inside a
    tf.while_loop / tf.cond body in a replica function; scope inside another strategy's scope."""
    st = mirrored(tf, n)
    ds = tf.distribute
    out = {"outside": {
        "get_cross_replica_context": _name(_get_cross_replica_context()),
        "in_cross_replica_context": ds.in_cross_replica_context(),
        "get_replica_context": _name(ds.get_replica_context()),
        "has_strategy": ds.has_strategy(),
        "get_strategy": _name(ds.get_strategy()),
    }}
    with st.scope():
        out["in_scope"] = {
            "get_cross_replica_context_is_strategy": _get_cross_replica_context() is st,
            "in_cross_replica_context": ds.in_cross_replica_context(),
            "get_replica_context": _name(ds.get_replica_context()),
            "has_strategy": ds.has_strategy(),
        }

    def in_run():
        return (_get_cross_replica_context() is None, ds.in_cross_replica_context(),
                _name(ds.get_replica_context()))
    r = st.run(in_run)
    out["in_run"] = {"get_cross_replica_context_is_none": r[0],
                     "in_cross_replica_context": r[1]}

    out["merge_call_default"] = attempt(
        lambda: ds.get_replica_context().merge_call(lambda s, x: x + 1.0, args=(1.0,)))
    out["merge_call_default_strategy_is_default"] = attempt(
        lambda: ds.get_replica_context().merge_call(lambda s: s is ds.get_strategy()))

    def mc(x):
        return ds.get_replica_context().merge_call(lambda s, v: v, args=(x,))

    @tf.function
    def in_while():
        return st.run(lambda: tf.while_loop(lambda c: c < 3.0, lambda c: mc(c) + 1.0, [0.0]))

    @tf.function
    def in_cond():
        return st.run(lambda: tf.cond(tf.constant(True), lambda: mc(1.0) + 1.0, lambda: 0.0))

    out["merge_call_in_while_loop"] = attempt(in_while)
    out["merge_call_in_cond"] = attempt(in_cond)
    other = tf.distribute.OneDeviceStrategy("CPU:0")
    try:
        with st.scope():
            with other.scope():
                pass
        out["scope_inside_other_scope"] = "ok"
    except Exception as e:  # noqa: BLE001
        out["scope_inside_other_scope"] = err(e)
    # last: TensorFlow fails part-way through entering a scope object again
    out["after_scope_exit_in_cross_replica_context"] = ds.in_cross_replica_context()
    scope = st.scope()
    try:
        with scope:
            first = ds.get_strategy() is st
        with scope:
            second = ds.get_strategy() is st
        out["scope_reentered"] = {"first": first, "second": second}
    except Exception as e:  # noqa: BLE001
        out["scope_reentered"] = err(e)

    out["after_reentry_in_cross_replica_context"] = ds.in_cross_replica_context()
    return out


def _run_cases(tf, st, cases, modes):
    """Each case run in each mode (in that order: TF's state carries from one to the next):
    its result's type tree, value and local results, or its error, keyed NAME_MODE."""
    out = {}
    for name, body in cases.items():
        for mode in modes:
            fn = tf.function(body) if mode == "tf_function" else body
            try:
                r = fn()
                out["%s_%s" % (name, mode)] = {"type_tree": type_tree(r), "value": enc(r),
                                               "local_results": local(st, r)}
            except Exception as e:  # noqa: BLE001
                out["%s_%s" % (name, mode)] = err(e)
    return out


# ---------------------------------------------------------------- closures

@scenario("closures", devices=(1, 2, 4))
def closures(tf, n):
    """A PerReplica (component i = [i+1, 10*(i+1)]) and a MirroredVariable ([1., 2.])
    captured by closure (not passed as arguments) in a tf.function: strategy.reduce SUM/MEAN
    (axis None and 0), strategy.gather(axis 0), strategy.run(fn, args=(captured,)),
    experimental_local_results; the same in eager mode for reference."""
    st = mirrored(tf, n)
    pr = _per_replica(tf, st, lambda i: tf.constant([i + 1.0, 10.0 * (i + 1)]))
    with st.scope():
        v = tf.Variable([1.0, 2.0])

    cases = {
        "reduce_sum": lambda: st.reduce("SUM", pr, axis=None),
        "reduce_mean": lambda: st.reduce("MEAN", pr, axis=None),
        "reduce_sum_axis0": lambda: st.reduce("SUM", pr, axis=0),
        "reduce_mean_axis0": lambda: st.reduce("MEAN", pr, axis=0),
        "gather_axis0": lambda: st.gather(pr, axis=0),
        "run_times2": lambda: st.run(lambda x: x * 2.0, args=(pr,)),
        "local_results": lambda: st.experimental_local_results(pr),
        "var_reduce_sum": lambda: st.reduce("SUM", v, axis=None),
        "var_reduce_mean": lambda: st.reduce("MEAN", v, axis=None),
        "var_run_plus1": lambda: st.run(lambda x: x + 1.0, args=(v,)),
        "var_gather_axis0": lambda: st.gather(v, axis=0),
        "run_reads_var": lambda: st.run(lambda: v * 3.0),
    }
    return _run_cases(tf, st, cases, ("tf_function", "eager"))


# ---------------------------------------------------------------- merge_call regrouping

@scenario("merge_regroup", devices=(2,))
def merge_regroup(tf, n):
    """What merge_fn receives for each kind of merge_call argument (type names), and the
    optimizer's `_update` idiom: merge_call(merge_fn, args=(var, 2.0)) where merge_fn calls
    strategy.extended.update(var, lambda v, x: v.assign_add(x), args=(value,))."""
    st = mirrored(tf, n)
    with st.scope():
        v = tf.Variable(1.0)
        w = tf.Variable(10.0)
    seen = {}

    def merge_fn(s, py_const, py_int, rid, same_const, var, mirrored_value):
        seen.update(py_const=_name(py_const), py_const_value=py_const if isinstance(py_const, float) else None,
                    py_int=_name(py_int), replica_id=_name(rid), same_const=_name(same_const),
                    var=_name(var), var_is_v=var is v, mirrored_value=_name(mirrored_value))
        return py_const

    @tf.function
    def step():
        def fn():
            ctx = tf.distribute.get_replica_context()
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
            reduced = ctx.all_reduce("SUM", rid + 1.0)
            return ctx.merge_call(merge_fn, args=(3.0, 4, rid, tf.constant(5.0), v, reduced))
        return st.run(fn)

    out = {"result": attempt(step)}
    out["merge_fn_saw"] = dict(seen)

    def update_fn(s, var, value):
        return s.extended.update(var, lambda x, d: x.assign_add(d), args=(value,))

    @tf.function
    def update_step():
        return st.run(lambda: tf.distribute.get_replica_context().merge_call(update_fn, args=(w, 2.0)))

    out["update_idiom"] = attempt(update_step)
    out["update_idiom_var"] = local(st, w)
    return out


# ---------------------------------------------------------------- variables

@scenario("variables_update", devices=(2, 4))
def variables_update(tf, n):
    """extended.update on a sync-on-read variable with a PerReplica argument (component i =
    10*(i+1)); what extended.update returns for group=True/False on a mirrored variable
    (eager and tf.function); creating an int32 MEAN distributed variable; per-replica updates
    of int32 SUM / ONLY_FIRST_REPLICA mirrored variables; extended.update of a mirrored
    variable with a PerReplica argument."""
    st = mirrored(tf, n)
    ext = st.extended
    VS, VA = tf.VariableSynchronization, tf.VariableAggregation
    with st.scope():
        sor = tf.Variable(0.0, synchronization=VS.ON_READ, aggregation=VA.SUM)
        sor_mean = tf.Variable(0.0, synchronization=VS.ON_READ, aggregation=VA.MEAN)
        m = tf.Variable(1.0)
        m_int_sum = tf.Variable(1, aggregation=VA.SUM)
        m_int_only_first = tf.Variable(1, aggregation=VA.ONLY_FIRST_REPLICA)
        out = {"create_int_mean_mirrored": attempt(lambda: tf.Variable(1, aggregation=VA.MEAN)),
               "create_int_mean_sync_on_read": attempt(
                   lambda: tf.Variable(1, synchronization=VS.ON_READ, aggregation=VA.MEAN))}
    pr = _per_replica(tf, st, lambda i: tf.constant(10.0 * (i + 1)))
    out["sync_on_read_sum_update_per_replica"] = {
        "returned": attempt(ext.update, sor, lambda x, d: x.assign(d), args=(pr,)),
        "after": local(st, sor), "read": attempt(sor.read_value)}
    out["sync_on_read_mean_update_per_replica"] = {
        "returned": attempt(ext.update, sor_mean, lambda x, d: x.assign_add(d), args=(pr,)),
        "after": local(st, sor_mean), "read": attempt(sor_mean.read_value)}
    for group in (True, False):
        r = None
        try:
            r = ext.update(m, lambda x, d: x.assign_add(d), args=(1.0,), group=group)
            out["update_group_%s_eager" % group] = {"type_tree": type_tree(r), "value": enc(r),
                                                   "local_results": local(st, r)}
        except Exception as e:  # noqa: BLE001
            out["update_group_%s_eager" % group] = err(e)

        @tf.function
        def fn(group=group):
            return ext.update(m, lambda x, d: x.assign_add(d) * 1.0, args=(1.0,), group=group)
        try:
            r = fn()
            out["update_group_%s_tf_function" % group] = {
                "type_tree": type_tree(r), "value": enc(r), "local_results": local(st, r)}
        except Exception as e:  # noqa: BLE001
            out["update_group_%s_tf_function" % group] = err(e)
    out["mirrored_after_updates"] = local(st, m)

    @tf.function
    def int_sum_step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            return m_int_sum.assign_add(rid + 1)
        return st.run(fn)

    @tf.function
    def int_only_first_step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            return m_int_only_first.assign_add(rid + 1)
        return st.run(fn)
    out["int_only_first_replica_update"] = attempt(int_only_first_step)
    out["int_only_first_after"] = local(st, m_int_only_first)
    out["int_sum_replica_update"] = attempt(int_sum_step)
    out["int_sum_after"] = local(st, m_int_sum)
    out["mirrored_update_per_replica"] = {
        "returned": attempt(ext.update, m, lambda x, d: x.assign(d), args=(pr,)), "after": local(st, m)}
    return out


@scenario("variables_assign_checks", devices=(2,))
def variables_assign_checks(tf, n):
    """assign with a wrong shape or dtype: a scalar into a [3] variable, 2.7 into int32,
    a [1,2] value into a [3,2] variable, a [3] value into [3] (fine), float into float64;
    for a plain tf.Variable and a MirroredVariable, cross-replica and in replica context."""
    st = mirrored(tf, n)

    def make():
        return {"f3": tf.Variable([1.0, 2.0, 3.0]), "i32": tf.Variable(1),
                "f32x2": tf.Variable(tf.zeros([3, 2])), "f64": tf.Variable(tf.constant(1.0, tf.float64))}
    plain = make()
    with st.scope():
        mirrored_vars = make()
    cases = {
        "scalar_into_3": ("f3", lambda: 5.0),
        "2.7_into_int32": ("i32", lambda: 2.7),
        "int_into_int32": ("i32", lambda: 4),
        "1x2_into_3x2": ("f32x2", lambda: tf.ones([1, 2])),
        "3_into_3": ("f3", lambda: tf.constant([4.0, 5.0, 6.0])),
        "float32_tensor_into_float64": ("f64", lambda: tf.constant(2.0)),
        "float64_tensor_into_float32": ("f3", lambda: tf.constant([1.0, 2.0, 3.0], tf.float64)),
        "list_into_3": ("f3", lambda: [7.0, 8.0, 9.0]),
    }
    out = {}
    for kind, vs in (("plain", plain), ("mirrored", mirrored_vars)):
        for name, (key, value) in cases.items():
            var = vs[key]
            out["%s_%s" % (kind, name)] = {"result": attempt(lambda: var.assign(value())),
                                          "after": attempt(var.read_value)}
            if kind == "mirrored":
                out["%s_%s_assign_add" % (kind, name)] = attempt(lambda: var.assign_add(value()))

        def replica_assign():
            return vs["f3"].assign(5.0)
        out["%s_replica_scalar_into_3" % kind] = attempt(lambda: st.run(replica_assign))
    return out


# ---------------------------------------------------------------- ragged per-replica values

@scenario("ragged", devices=(2, 3))
def ragged(tf, n):
    """Per-replica values whose components differ in shape: component i of `x` is a
    (i+2, 3) float tensor (row r = 100*i + 10*r + [0,1,2]); of `y` a (2, i+1) tensor.
    strategy.gather axis 0 / 1 (and nested {'x', 'y'}), reduce SUM/MEAN with axis 0 / 1 /
    None, experimental_local_results, ReplicaContext.all_gather axis 0 / 1 inside run, run
    output of different lengths (x[:i+1]) then gathered and reduced; eager and tf.function."""
    st = mirrored(tf, n)

    def xi(i):
        return tf.constant([[100.0 * i + 10 * r + c for c in range(3)] for r in range(i + 2)])

    def yi(i):
        return tf.reshape(tf.range(2 * (i + 1), dtype=tf.float32) + 100.0 * i, [2, i + 1])
    x = _per_replica(tf, st, xi)
    y = _per_replica(tf, st, yi)
    cases = {
        "local_results_x": lambda: st.experimental_local_results(x),
        "gather_x_axis0": lambda: st.gather(x, axis=0),
        "gather_x_axis1": lambda: st.gather(x, axis=1),
        "gather_y_axis1": lambda: st.gather(y, axis=1),
        "gather_y_axis0": lambda: st.gather(y, axis=0),
        "gather_nested_axis0": lambda: st.gather({"x": x, "z": (x,)}, axis=0),
        "reduce_sum_x_axis0": lambda: st.reduce("SUM", x, axis=0),
        "reduce_mean_x_axis0": lambda: st.reduce("MEAN", x, axis=0),
        "reduce_sum_x_axis1": lambda: st.reduce("SUM", x, axis=1),
        "reduce_sum_x_axisNone": lambda: st.reduce("SUM", x, axis=None),
        "reduce_mean_y_axis1": lambda: st.reduce("MEAN", y, axis=1),
        "reduce_sum_y_axis0": lambda: st.reduce("SUM", y, axis=0),
        "reduce_mean_nested_axis0": lambda: st.reduce("MEAN", {"x": x, "x2": [x]}, axis=0),
        "all_gather_x_axis0": lambda: st.run(
            lambda v: tf.distribute.get_replica_context().all_gather(v, axis=0), args=(x,)),
        "all_gather_y_axis1": lambda: st.run(
            lambda v: tf.distribute.get_replica_context().all_gather(v, axis=1), args=(y,)),
        "all_gather_nested_axis0": lambda: st.run(
            lambda v: tf.distribute.get_replica_context().all_gather({"a": v, "b": [v]}, axis=0), args=(x,)),
        "run_ragged_plus1": lambda: st.run(lambda v: v + 1.0, args=(x,)),
    }

    def ragged_out():
        def fn():
            i = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.range(10.0)[:i + 1] * 2.0
        return st.run(fn)
    cases["run_output_lengths_local"] = lambda: st.experimental_local_results(ragged_out())
    cases["run_output_lengths_gather"] = lambda: st.gather(ragged_out(), axis=0)
    cases["run_output_lengths_reduce_sum_axis0"] = lambda: st.reduce("SUM", ragged_out(), axis=0)
    return _run_cases(tf, st, cases, ("eager", "tf_function"))


@scenario("ragged_dataset", devices=(2,))
def ragged_dataset(tf, n):
    """distribute_datasets_from_function whose dataset yields a batch of 2 rows then one of
    3 rows: replica 0 gets [[0,1],[2,3]]-like rows, replica 1 three rows. Per step: local
    results, gather axis 0, reduce SUM/MEAN axis 0, run(x*2) gathered; in eager mode and
    with the step in a tf.function."""
    st = mirrored(tf, n)

    def dataset_fn(ctx):
        a = tf.data.Dataset.from_tensor_slices(tf.reshape(tf.range(4.0), [2, 2])).batch(2)
        b = tf.data.Dataset.from_tensor_slices(tf.reshape(tf.range(10.0, 16.0), [3, 2])).batch(3)
        return a.concatenate(b)
    out = {}
    for mode in ("eager", "tf_function"):
        def step(x):
            y = st.run(lambda v: v * 2.0, args=(x,))
            return {"local": st.experimental_local_results(x), "gather": st.gather(x, axis=0),
                    "sum0": st.reduce("SUM", x, axis=0), "mean0": st.reduce("MEAN", x, axis=0),
                    "run_gather": st.gather(y, axis=0)}
        fn = tf.function(step) if mode == "tf_function" else step
        steps = []
        try:
            for x in st.distribute_datasets_from_function(dataset_fn):
                steps.append(attempt(fn, x))
        except Exception as e:  # noqa: BLE001
            steps.append(err(e))
        out[mode] = steps
    return out


# ---------------------------------------------------------------- bad values

@scenario("bad_values", devices=(2,))
def bad_values(tf, n):
    """Out-of-range axes in reduce/gather/all_gather (x has shape [3] per replica); a
    PerReplica with a None component; a Mirrored built from differing components given to
    run (what replica i sees) and to reduce; axis given as a string; an unknown aggregation."""
    st = mirrored(tf, n)
    values_lib = _values_lib()
    x = _per_replica(tf, st, lambda i: tf.constant([1.0, 2.0, 3.0]) * (i + 1))
    out = {}
    for axis in (1, 3, -1, -2):
        out["reduce_sum_axis_%d" % axis] = attempt(st.reduce, "SUM", x, axis=axis)
        out["gather_axis_%d" % axis] = attempt(st.gather, x, axis=axis)
        out["all_gather_axis_%d" % axis] = attempt(
            st.run, lambda v, a=axis: tf.distribute.get_replica_context().all_gather(v, axis=a), args=(x,))
    out["reduce_axis_string"] = attempt(st.reduce, "SUM", x, axis="0")
    out["gather_axis_string"] = attempt(st.gather, x, axis="0")
    try:
        pr_none = values_lib.PerReplica([None, tf.constant(1.0)])
        out["per_replica_none_reduce"] = attempt(st.reduce, "SUM", pr_none, axis=None)
        out["per_replica_none_run"] = attempt(st.run, lambda v: v, args=(pr_none,))
    except Exception as e:  # noqa: BLE001
        out["per_replica_none_build"] = err(e)
    mirrored_diff = values_lib.Mirrored([tf.constant(1.0), tf.constant(2.0)])
    out["mirrored_differing_run"] = attempt(st.run, lambda v: v * 1.0, args=(mirrored_diff,))
    out["mirrored_differing_run_tf_function"] = attempt(
        tf.function(lambda: st.run(lambda v: v * 1.0, args=(mirrored_diff,))))
    out["mirrored_differing_reduce_sum"] = attempt(st.reduce, "SUM", mirrored_diff, axis=None)
    out["mirrored_differing_local_results"] = local(st, mirrored_diff)
    with st.scope():
        out["aggregation_string"] = attempt(lambda: tf.Variable(1.0, aggregation="max"))
        out["aggregation_bad_string_sum"] = attempt(lambda: tf.Variable(1.0, aggregation="sum"))
        out["synchronization_string"] = attempt(lambda: tf.Variable(1.0, synchronization="on_read"))
    out["reduce_op_int"] = attempt(st.reduce, 1, x, axis=None)
    out["run_args_not_tuple"] = attempt(st.run, lambda v: v, args=x)
    out["run_fn_not_callable"] = attempt(st.run, 3)
    return out


if __name__ == "__main__":
    sys.exit(main())
