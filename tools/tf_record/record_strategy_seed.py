"""Record tf.distribute.Strategy / DistributedValues behaviour (seed files 000, 001, 003).

Writes tests/data/tf/strategy_seed.json via run_all.sh.  Each scenario runs in its
own process: ``python record_strategy_seed.py --scenario NAME``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (scenario, mirrored, enc, err, attempt, local, dv_rec,  # noqa: E402
                     type_tree, main)

OPS = ("SUM", "MEAN")


def _reductions(tf, st, x):
    """strategy.reduce(SUM/MEAN, x, axis=None/0), each or its error."""
    out = {}
    for op in OPS:
        for axis in (None, 0):
            key = "%s_axis_%s" % (op, axis)
            out[key] = attempt(st.reduce, getattr(tf.distribute.ReduceOp, op), x, axis=axis)
    return out


def _steps(tf, st, ds, max_steps=10, run_plus_one=True, reduce=True):
    """Iterate a distributed dataset; per step: local results, repr, run(x+1), reductions."""
    dist = st.experimental_distribute_dataset(ds)
    steps = []

    @tf.function
    def plus_one(x):
        return x + 1.0

    for i, x in enumerate(dist):
        if i >= max_steps:
            break
        rec = dv_rec(st, x)
        if reduce:
            rec["reduce"] = _reductions(tf, st, x)
        if run_plus_one:
            try:
                y = st.run(plus_one, args=(x,))
                rec["run_plus_one"] = dv_rec(st, y)
                if reduce:
                    rec["run_plus_one"]["reduce"] = _reductions(tf, st, y)
            except Exception as e:  # noqa: BLE001
                rec["run_plus_one"] = err(e)
        steps.append(rec)
    return {"element_spec": repr(dist.element_spec), "steps": steps}


# ---------------------------------------------------------------- run

@scenario("run_replica_id", devices=(1, 2, 4))
def run_replica_id(tf, n):
    """Seed 000/001 example 2: @tf.function run() returning
    tf.distribute.get_replica_context().replica_id_in_sync_group; strategy.run(run).
    Also the same without tf.function (eager) and num_replicas_in_sync."""
    st = mirrored(tf, n)

    @tf.function
    def run():
        ctx = tf.distribute.get_replica_context()
        return ctx.replica_id_in_sync_group

    def run_eager():
        ctx = tf.distribute.get_replica_context()
        return ctx.replica_id_in_sync_group

    def nrs():
        ctx = tf.distribute.get_replica_context()
        return ctx.num_replicas_in_sync, type(ctx.num_replicas_in_sync).__name__

    out = {"num_replicas_in_sync": st.num_replicas_in_sync,
           "tf_function": dv_rec(st, st.run(run))}
    try:
        out["eager"] = dv_rec(st, st.run(run_eager))
    except Exception as e:  # noqa: BLE001
        out["eager"] = err(e)
    try:
        r = st.run(nrs)
        out["ctx_num_replicas_in_sync"] = {"value_type_tree": type_tree(r), "value": enc(r)}
    except Exception as e:  # noqa: BLE001
        out["ctx_num_replicas_in_sync"] = err(e)
    return out


@scenario("run_seed_examples", devices=(1, 2, 4))
def run_seed_examples(tf, n):
    """Seed 003 Strategy.run examples: (1) constant tensor input tf.constant(3.0),
    replica_fn(input) = input*2.0 (tf.function); (2) inside a tf.function,
    values_from_function(value_fn -> value_context.num_replicas_in_sync) then
    run(replica_fn2 = input*2)."""
    st = mirrored(tf, n)
    out = {}

    tensor_input = tf.constant(3.0)

    @tf.function
    def replica_fn(input):
        return input * 2.0

    try:
        out["example1_constant_input"] = dv_rec(st, st.run(replica_fn, args=(tensor_input,)))
    except Exception as e:  # noqa: BLE001
        out["example1_constant_input"] = err(e)

    @tf.function
    def run():
        def value_fn(value_context):
            return value_context.num_replicas_in_sync
        distributed_values = st.experimental_distribute_values_from_function(value_fn)

        def replica_fn2(input):
            return input * 2
        return st.run(replica_fn2, args=(distributed_values,))

    try:
        out["example2_distributed_values_input"] = dv_rec(st, run())
    except Exception as e:  # noqa: BLE001
        out["example2_distributed_values_input"] = err(e)
    return out


@scenario("run_structured_outputs", devices=(2,))
def run_structured_outputs(tf, n):
    """What strategy.run returns for structured / special outputs (regrouping):
    (loss, {"w": grad}) tuple+dict; a Python constant; the same captured tensor on
    every replica; None; an all_reduce result; a list."""
    st = mirrored(tf, n)
    captured = tf.constant(7.0)
    out = {}

    def rid():
        return tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)

    cases = {
        "tuple_dict": lambda: (rid() * 2.0, {"w": rid() + 1.0, "b": rid() - 1.0}),
        "list": lambda: [rid(), rid() * 10.0],
        "python_constant": lambda: 5.0,
        "same_captured_tensor": lambda: captured,
        "none": lambda: None,
        "all_reduce_result": lambda: tf.distribute.get_replica_context().all_reduce(
            "SUM", rid() + 1.0),
        "identity_of_input_constant": lambda: tf.identity(captured),
    }
    for name, body in cases.items():
        for mode in ("tf_function", "eager"):
            fn = tf.function(body) if mode == "tf_function" else body
            try:
                r = st.run(fn)
                rec = {"type_tree": type_tree(r), "value": enc(r)}
                if r is not None:
                    rec["local_results"] = attempt(
                        lambda: tf.nest.map_structure(
                            lambda leaf: list(st.experimental_local_results(leaf)), r))
                    rec["experimental_local_results_of_whole"] = local(st, r)
                    rec["repr"] = repr(r)
            except Exception as e:  # noqa: BLE001
                rec = err(e)
            out["%s_%s" % (name, mode)] = rec
    return out


# ---------------------------------------------------------------- datasets

@scenario("dataset_5678_batch2", devices=(1, 2, 4))
def dataset_5678_batch2(tf, n):
    """Seed 000/001 examples 1,3,4,5: from_tensor_slices([5.,6.,7.,8.]).batch(2),
    experimental_distribute_dataset; every step: local results + repr,
    run(tf.function input+1.0), reduce SUM/MEAN axis None/0 of both."""
    st = mirrored(tf, n)
    ds = tf.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(2)
    return _steps(tf, st, ds)


@scenario("dataset_5678_batch4", devices=(2, 4))
def dataset_5678_batch4(tf, n):
    """from_tensor_slices([5.,6.,7.,8.]).batch(4) distributed; per step local results,
    run(input+1.0), reduce SUM/MEAN axis None/0."""
    st = mirrored(tf, n)
    ds = tf.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(4)
    return _steps(tf, st, ds)


@scenario("partial_range6_batch4", devices=(2, 3, 4))
def partial_range6_batch4(tf, n):
    """tf.data.Dataset.range(6) cast to float32, .batch(4): second global batch has
    2 elements. Per step local results, run(x+1.0), reduce SUM/MEAN axis None/0
    (axis=None on uneven shapes may fail)."""
    st = mirrored(tf, n)
    ds = tf.data.Dataset.range(6).map(lambda x: tf.cast(x, tf.float32)).batch(4)
    return _steps(tf, st, ds)


@scenario("reduce_docstring", devices=(2,))
def reduce_docstring(tf, n):
    """Seed 003 reduce docstring: global batch 8 values 0..7 over 2 replicas:
    reduce axis=None -> [0+4,1+5,2+6,3+7]; axis=0 -> 28. Partial batch of 6
    (range(14).batch(8), second batch [8..13]) split [4,2]: MEAN axis=0 divides by 6.
    Also reduce of a per-replica reduce_mean (weights 1/4 vs 1/2)."""
    st = mirrored(tf, n)
    ds = tf.data.Dataset.range(14).map(lambda x: tf.cast(x, tf.float32)).batch(8)
    res = _steps(tf, st, ds)

    @tf.function
    def per_replica_mean(x):
        return tf.reduce_mean(x)

    extra = []
    for x in st.experimental_distribute_dataset(ds):
        m = st.run(per_replica_mean, args=(x,))
        extra.append({"per_replica_reduce_mean": local(st, m),
                      "MEAN_of_means": attempt(st.reduce, "MEAN", m, axis=None)})
    res["mean_of_means"] = extra
    return res


@scenario("reduce_plain_value", devices=(1, 2))
def reduce_plain_value(tf, n):
    """strategy.reduce of non-distributed values: tf.constant([1.,2.,3.]) and the
    Python float 2.0 with SUM/MEAN, axis None/0; also in a tf.function; also the
    reduce_op given as strings "SUM"/"sum"/"mean" and an invalid "MAX"; also reduce
    called inside strategy.run (replica context)."""
    st = mirrored(tf, n)
    t = tf.constant([1., 2., 3.])
    out = {"tensor": _reductions(tf, st, t),
           "python_float": {op: attempt(st.reduce, op, 2.0, axis=None) for op in OPS}}

    @tf.function
    def in_fn(op, axis):
        return st.reduce(op, t, axis=axis)

    out["tensor_in_tf_function"] = {
        "%s_axis_%s" % (op, ax): attempt(in_fn, op, ax) for op in OPS for ax in (None, 0)}

    pr = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
    out["string_ops_on_per_replica"] = {
        s: attempt(st.reduce, s, pr, axis=None) for s in ("SUM", "sum", "mean", "Mean", "MAX")}
    out["reduce_op_enum_repr"] = [repr(tf.distribute.ReduceOp.SUM), repr(tf.distribute.ReduceOp.MEAN)]

    def bad():
        return st.reduce("SUM", tf.constant(1.0), axis=None)
    try:
        out["reduce_in_replica_context"] = enc(st.run(bad))
    except Exception as e:  # noqa: BLE001
        out["reduce_in_replica_context"] = err(e)
    try:
        out["reduce_in_replica_context_tf_function"] = enc(st.run(tf.function(bad)))
    except Exception as e:  # noqa: BLE001
        out["reduce_in_replica_context_tf_function"] = err(e)
    return out


@scenario("reduce_nested", devices=(2,))
def reduce_nested(tf, n):
    """strategy.reduce(SUM/MEAN) of a nested structure (tuple, dict) of PerReplica
    values, and experimental_local_results of a plain tensor / Python value."""
    st = mirrored(tf, n)
    a = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
    b = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([10.0, 20.0]) * float(ctx.replica_id_in_sync_group + 1))
    out = {}
    for op in OPS:
        out["tuple_" + op] = attempt(st.reduce, op, (a, b), axis=None)
        out["dict_" + op] = attempt(st.reduce, op, {"a": a, "b": b}, axis=None)
    out["local_results_plain_tensor"] = local(st, tf.constant(1.0))
    out["local_results_python_float"] = local(st, 3.5)
    out["local_results_tuple_of_per_replica"] = local(st, (a, b))
    out["local_results_types"] = attempt(
        lambda: [type(st.experimental_local_results(tf.constant(1.0))).__name__,
                 type(st.experimental_local_results(a)).__name__])
    return out


# ---------------------------------------------------------------- values_from_function

@scenario("values_from_function_seed", devices=(1, 2, 3, 4))
def values_from_function_seed(tf, n):
    """Seed 003 experimental_distribute_values_from_function examples:
    (1) value_fn -> tf.constant(1.); (2) array_value=np.array([3.,2.,1.]),
    value_fn -> array_value[ctx.replica_id_in_sync_group] (IndexError with 4 replicas);
    (3) value_fn -> ctx.num_replicas_in_sync. Also value_fn -> ctx.replica_id_in_sync_group
    (and its Python type), and a ValueContext repr."""
    import numpy as np
    st = mirrored(tf, n)
    out = {}

    def ex1(ctx):
        return tf.constant(1.)

    array_value = np.array([3., 2., 1.])

    def ex2(ctx):
        return array_value[ctx.replica_id_in_sync_group]

    def ex3(ctx):
        return ctx.num_replicas_in_sync

    def rid(ctx):
        return ctx.replica_id_in_sync_group

    seen = []

    def ctx_info(ctx):
        seen.append({"replica_id_in_sync_group": ctx.replica_id_in_sync_group,
                     "replica_id_type": type(ctx.replica_id_in_sync_group).__name__,
                     "num_replicas_in_sync": ctx.num_replicas_in_sync,
                     "repr": repr(ctx)})
        return tf.constant(0)

    for name, fn in (("example1_constant", ex1), ("example2_array_by_replica_id", ex2),
                     ("example3_num_replicas", ex3), ("replica_id", rid)):
        try:
            v = st.experimental_distribute_values_from_function(fn)
            rec = dv_rec(st, v)
            rec["local_result_python_types"] = [type(c).__name__ for c in st.experimental_local_results(v)]
        except Exception as e:  # noqa: BLE001
            rec = err(e)
        out[name] = rec
    try:
        st.experimental_distribute_values_from_function(ctx_info)
        out["value_context"] = seen
    except Exception as e:  # noqa: BLE001
        out["value_context"] = err(e)
    return out


# ---------------------------------------------------------------- gather / collectives

@scenario("gather", devices=(2, 4))
def gather(tf, n):
    """strategy.gather: TF doc example values_from_function(lambda _:
    tf.identity(tf.constant([[1],[2]]))) with axis 0 and 1 (in a tf.function and
    eager); replica-dependent values; a partial batch (range(6).batch(4), uneven
    components); a plain tensor; per-replica scalars (axis 0)."""
    st = mirrored(tf, n)
    out = {}
    dv = st.experimental_distribute_values_from_function(
        lambda _: tf.identity(tf.constant([[1], [2]])))

    @tf.function
    def run(v, axis):
        return st.gather(v, axis=axis)

    for ax in (0, 1):
        out["doc_example_axis%d_tf_function" % ax] = attempt(run, dv, ax)
        out["doc_example_axis%d_eager" % ax] = attempt(st.gather, dv, axis=ax)

    rd = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([[float(ctx.replica_id_in_sync_group)] * 2]))
    out["replica_dependent_1x2_axis0"] = attempt(st.gather, rd, axis=0)
    out["replica_dependent_1x2_axis1"] = attempt(st.gather, rd, axis=1)

    ds = tf.data.Dataset.range(6).map(lambda x: tf.cast(x, tf.float32)).batch(4)
    steps = []
    for x in st.experimental_distribute_dataset(ds):
        steps.append({"local_results": local(st, x), "gather_axis0": attempt(st.gather, x, axis=0)})
    out["partial_batch_range6_batch4"] = steps

    out["plain_tensor_axis0"] = attempt(st.gather, tf.constant([1., 2.]), axis=0)
    sc = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group)))
    out["per_replica_scalars_axis0"] = attempt(st.gather, sc, axis=0)

    def in_replica():
        return st.gather(tf.constant([1.]), axis=0)
    try:
        out["gather_in_replica_context"] = enc(st.run(in_replica))
    except Exception as e:  # noqa: BLE001
        out["gather_in_replica_context"] = err(e)
    return out


@scenario("replica_all_reduce", devices=(2, 4))
def replica_all_reduce(tf, n):
    """ReplicaContext.all_reduce inside strategy.run (tf.function unless noted) of
    replica-id-dependent values: float rid+1 (SUM/MEAN), vector [rid, 10*rid], int32
    rid (MEAN on ints), a nested tuple, strings "sum"/"mean", eager run."""
    st = mirrored(tf, n)
    out = {}

    def rid_f():
        return tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)

    def ar(op, v):
        return tf.distribute.get_replica_context().all_reduce(op, v)

    R = tf.distribute.ReduceOp
    cases = {
        "float_rid_plus1_SUM": lambda: ar(R.SUM, rid_f() + 1.0),
        "float_rid_plus1_MEAN": lambda: ar(R.MEAN, rid_f() + 1.0),
        "vector_SUM": lambda: ar(R.SUM, tf.stack([rid_f(), 10.0 * rid_f()])),
        "vector_MEAN": lambda: ar(R.MEAN, tf.stack([rid_f(), 10.0 * rid_f()])),
        "int32_rid_SUM": lambda: ar(R.SUM, tf.distribute.get_replica_context().replica_id_in_sync_group),
        "int32_rid_MEAN": lambda: ar(R.MEAN, tf.distribute.get_replica_context().replica_id_in_sync_group),
        "int32_rid_plus1_MEAN": lambda: ar(R.MEAN, tf.distribute.get_replica_context().replica_id_in_sync_group + 1),
        "nested_tuple_SUM": lambda: ar(R.SUM, (rid_f(), {"x": rid_f() * 2.0})),
        "string_sum": lambda: ar("sum", rid_f() + 1.0),
        "string_MEAN": lambda: ar("MEAN", rid_f() + 1.0),
        "python_float_SUM": lambda: ar(R.SUM, 1.5),
        "constant_SUM": lambda: ar(R.SUM, tf.constant(2.0)),
    }
    for name, body in cases.items():
        try:
            r = st.run(tf.function(body))
            out[name] = {"type_tree": type_tree(r), "value": enc(r)}
        except Exception as e:  # noqa: BLE001
            out[name] = err(e)
    try:
        r = st.run(cases["float_rid_plus1_SUM"])
        out["float_rid_plus1_SUM_eager"] = {"type_tree": type_tree(r), "value": enc(r)}
    except Exception as e:  # noqa: BLE001
        out["float_rid_plus1_SUM_eager"] = err(e)
    return out


@scenario("replica_all_gather", devices=(2, 4))
def replica_all_gather(tf, n):
    """ReplicaContext.all_gather inside strategy.run (tf.function): [rid+1] axis 0;
    [[rid, rid]] axis 0 and 1; a scalar (axis 0); uneven lengths tf.range(rid+1)
    axis 0; a nested tuple."""
    st = mirrored(tf, n)
    out = {}

    def ctx():
        return tf.distribute.get_replica_context()

    def rid_f():
        return tf.cast(ctx().replica_id_in_sync_group, tf.float32)

    cases = {
        "vector_rid_plus1_axis0": lambda: ctx().all_gather(tf.reshape(rid_f() + 1.0, [1]), axis=0),
        "matrix_1x2_axis0": lambda: ctx().all_gather(tf.fill([1, 2], rid_f()), axis=0),
        "matrix_1x2_axis1": lambda: ctx().all_gather(tf.fill([1, 2], rid_f()), axis=1),
        "scalar_axis0": lambda: ctx().all_gather(rid_f(), axis=0),
        "uneven_range_axis0": lambda: ctx().all_gather(
            tf.cast(tf.range(ctx().replica_id_in_sync_group + 1), tf.float32), axis=0),
        "nested_tuple_axis0": lambda: ctx().all_gather(
            (tf.reshape(rid_f(), [1]), tf.fill([1, 2], rid_f() * 10.0)), axis=0),
    }
    for name, body in cases.items():
        try:
            r = st.run(tf.function(body))
            out[name] = {"type_tree": type_tree(r), "value": enc(r)}
        except Exception as e:  # noqa: BLE001
            out[name] = err(e)
    return out


@scenario("repr_values", devices=(2,))
def repr_values(tf, n):
    """repr() strings: PerReplica from run (int32 scalar, float vector), PerReplica
    from a distributed dataset, Mirrored from extended.reduce_to / broadcast_to,
    MirroredVariable and SyncOnReadVariable, a Mirrored made by hand, and str()."""
    from tensorflow.python.distribute import values as values_lib
    st = mirrored(tf, n)
    out = {}

    @tf.function
    def rid():
        return tf.distribute.get_replica_context().replica_id_in_sync_group

    pr = st.run(rid)
    out["per_replica_int_scalar"] = {"repr": repr(pr), "str": str(pr), "type": type(pr).__name__}

    @tf.function
    def vec():
        r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        return tf.stack([r, r + 0.5])

    pv = st.run(vec)
    out["per_replica_float_vector"] = {"repr": repr(pv), "str": str(pv), "type": type(pv).__name__}

    ds = tf.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(2)
    x = next(iter(st.experimental_distribute_dataset(ds)))
    out["per_replica_dataset"] = {"repr": repr(x), "type": type(x).__name__}

    try:
        m = st.extended.reduce_to(tf.distribute.ReduceOp.SUM, pv, destinations=pv)
        out["reduce_to_result"] = {"repr": repr(m), "type": type(m).__name__, "value": enc(m)}
    except Exception as e:  # noqa: BLE001
        out["reduce_to_result"] = err(e)
    with st.scope():
        mv = tf.Variable(1.)
        sv = tf.Variable([1., 2.], synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
    try:
        b = st.extended.broadcast_to(tf.constant(3.0), destinations=mv)
        out["broadcast_to_result"] = {"repr": repr(b), "type": type(b).__name__, "value": enc(b)}
    except Exception as e:  # noqa: BLE001
        out["broadcast_to_result"] = err(e)
    out["mirrored_variable"] = {"repr": repr(mv), "str": str(mv), "type": type(mv).__name__}
    out["sync_on_read_variable"] = {"repr": repr(sv), "str": str(sv), "type": type(sv).__name__}
    try:
        hm = values_lib.Mirrored((tf.constant(1.0), tf.constant(1.0)))
        out["hand_made_mirrored"] = {"repr": repr(hm), "type": type(hm).__name__}
    except Exception as e:  # noqa: BLE001
        out["hand_made_mirrored"] = err(e)
    try:
        out["per_replica_as_array"] = attempt(lambda: __import__("numpy").asarray(pr))
        out["per_replica_convert_to_tensor"] = attempt(tf.convert_to_tensor, pr)
    except Exception as e:  # noqa: BLE001
        out["per_replica_as_array"] = err(e)
    out["isinstance"] = {
        "PerReplica_is_DistributedValues": isinstance(pr, tf.distribute.DistributedValues),
        "MirroredVariable_is_DistributedValues": isinstance(mv, tf.distribute.DistributedValues),
        "SyncOnReadVariable_is_DistributedValues": isinstance(sv, tf.distribute.DistributedValues),
        "MirroredVariable_is_tf_Variable": isinstance(mv, tf.Variable),
    }
    return out


if __name__ == "__main__":
    sys.exit(main())
