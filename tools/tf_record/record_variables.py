"""Record distributed-variable behaviour of tf.distribute.MirroredStrategy
(seed files 002, 004): synchronization x aggregation rules in replica and
cross-replica context, merge_call, StrategyExtended reduce_to / batch_reduce_to /
broadcast_to / update, and the sync-on-read checkpoint rule.

Writes tests/data/tf/variables.json via run_all.sh.  Each scenario runs in its own
process: ``python record_variables.py --scenario NAME``.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
from _common import (scenario, mirrored, enc, err, attempt, local, dv_rec,  # noqa: E402
                     main, run_child, setup)

SYNCS = ("AUTO", "ON_WRITE", "ON_READ")
AGGS = ("NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA")
SHAPES = {"scalar": 1.0, "vector": [1.0, 2.0]}


def _make_var(tf, st, init, sync, agg):
    with st.scope():
        return tf.Variable(init, synchronization=getattr(tf.VariableSynchronization, sync),
                           aggregation=getattr(tf.VariableAggregation, agg))


def _var_state(tf, st, v):
    """Per-replica component values and the cross-replica reads of ``v``."""
    state = {"values": attempt(lambda: [c.numpy() for c in v.values])}
    state["read_value"] = attempt(v.read_value)
    state["convert_to_tensor"] = attempt(tf.convert_to_tensor, v)
    with st.scope():
        state["read_value_in_scope"] = attempt(v.read_value)
    return state


def _var_info(v):
    return {"type": type(v).__name__,
            "synchronization": attempt(lambda: v.synchronization.name),
            "aggregation": attempt(lambda: v.aggregation.name),
            "shape": attempt(lambda: v.shape.as_list()),
            "dtype": attempt(lambda: v.dtype.name)}


def _delta(tf, shape, kind):
    """The update value, built inside a replica function.

    rid: replica_id+1 (scalar) or [rid+1, 10*(rid+1)]; const: 2.0 or [2., 20.]."""
    if kind == "rid":
        r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0
        return r if shape == "scalar" else tf.stack([r, 10.0 * r])
    return tf.constant(2.0) if shape == "scalar" else tf.constant([2.0, 20.0])


REPLICA_OPS = (("assign", "rid"), ("assign_add", "rid"), ("assign_sub", "rid"),
               ("assign", "const"), ("assign_add", "const"))


def _replica_context(tf, n, sync, agg):
    st = mirrored(tf, n)
    out = {}
    for shape, init in SHAPES.items():
        for op, kind in REPLICA_OPS:
            key = "%s_%s_%s" % (shape, op, kind)
            v = _make_var(tf, st, init, sync, agg)
            rec = {"variable": _var_info(v), "before": _var_state(tf, st, v)}

            @tf.function
            def step():
                def fn():
                    ret = getattr(v, op)(_delta(tf, shape, kind))
                    return {"returned": tf.identity(ret),
                            "read_in_replica_after": tf.identity(v.read_value())}
                return st.run(fn)

            try:
                r = step()
                rec["returned_per_replica"] = local(st, r["returned"])
                rec["read_in_replica_after"] = local(st, r["read_in_replica_after"])
                rec["returned_type"] = type(r["returned"]).__name__
            except Exception as e:  # noqa: BLE001
                rec["run_error"] = err(e)
            rec["after"] = _var_state(tf, st, v)
            out[key] = rec
    return out


def _cross_replica(tf, n, sync, agg):
    st = mirrored(tf, n)
    out = {}
    c = tf.constant
    vals = {"scalar": {"assign": 5.0, "assign_add": 2.0, "assign_sub": 2.0},
            "vector": {"assign": c([5.0, 50.0]), "assign_add": c([2.0, 20.0]),
                       "assign_sub": c([2.0, 20.0])}}
    # a Python list argument (TF's SUM sync-on-read assign divides it by n: TypeError)
    v = _make_var(tf, st, [1.0, 2.0], sync, agg)
    with st.scope():
        rec = {"returned": attempt(lambda: v.assign([5.0, 50.0]))}
    rec["after"] = _var_state(tf, st, v)
    out["vector_assign_python_list_eager"] = rec
    for shape, init in SHAPES.items():
        for op in ("assign", "assign_add", "assign_sub"):
            for mode in ("eager", "tf_function"):
                key = "%s_%s_%s" % (shape, op, mode)
                v = _make_var(tf, st, init, sync, agg)
                rec = {"variable": _var_info(v), "arg": enc(vals[shape][op]),
                       "before": _var_state(tf, st, v)}
                with st.scope():
                    try:
                        if mode == "eager":
                            ret = getattr(v, op)(vals[shape][op])
                        else:
                            ret = tf.function(lambda: tf.identity(getattr(v, op)(vals[shape][op])))()
                        rec["returned"] = {"type": type(ret).__name__, "value": enc(ret)}
                    except Exception as e:  # noqa: BLE001
                        rec["returned"] = err(e)
                rec["after"] = _var_state(tf, st, v)
                out[key] = rec
    return out


for _sync in SYNCS:
    for _agg in AGGS:
        def _mk(sync, agg):
            def rc(tf, n):
                return _replica_context(tf, n, sync, agg)
            rc.__doc__ = (
                "tf.Variable(init, synchronization=%s, aggregation=%s) created in "
                "MirroredStrategy.scope(); init 1.0 (scalar) or [1.,2.] (vector); a fresh "
                "variable per op. Inside strategy.run in a tf.function each replica calls "
                "assign/assign_add/assign_sub with rid = replica_id+1.0 (vector: [rid, 10*rid]) "
                "or const = 2.0 (vector [2., 20.]). Records the per-replica value returned by "
                "the assign call, a replica-local read after it, and afterwards the component "
                "values (.values) and cross-replica reads (read_value outside/inside scope, "
                "tf.convert_to_tensor)." % (sync, agg))

            def cr(tf, n):
                return _cross_replica(tf, n, sync, agg)
            cr.__doc__ = (
                "tf.Variable(init, synchronization=%s, aggregation=%s) in "
                "MirroredStrategy.scope(), init 1.0 or [1.,2.]; in cross-replica context "
                "(inside scope, outside run) assign(5.0 | [5.,50.]), assign_add(2.0 | [2.,20.]), "
                "assign_sub(same), vector args as tf.constant, eagerly and in a tf.function; "
                "records the returned value, "
                "component values and reads before/after." % (sync, agg))
            scenario("replica_%s_%s" % (sync.lower(), agg.lower()), devices=(2, 4))(rc)
            scenario("cross_%s_%s" % (sync.lower(), agg.lower()), devices=(2, 4))(cr)
        _mk(_sync, _agg)


@scenario("cross_assign_per_replica", devices=(2,))
def cross_assign_per_replica(tf, n):
    """Cross-replica assign of a PerReplica value (values_from_function -> rid+1.0)
    to variables of each sync/aggregation (TF lets mirrored copies differ)."""
    st = mirrored(tf, n)
    out = {}
    pr = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
    for sync in ("ON_WRITE", "ON_READ"):
        for agg in AGGS:
            v = _make_var(tf, st, 1.0, sync, agg)
            rec = {"variable": _var_info(v)}
            with st.scope():
                rec["returned"] = attempt(lambda: v.assign(pr))
            rec["after"] = _var_state(tf, st, v)
            out["%s_%s" % (sync.lower(), agg.lower())] = rec
    return out


@scenario("replica_read_initial", devices=(2, 4))
def replica_read_initial(tf, n):
    """Freshly created variables (init 1.0) of each sync x aggregation: component
    values, cross-replica reads, and reads inside strategy.run (replica context)."""
    st = mirrored(tf, n)
    out = {}
    for sync in SYNCS:
        for agg in AGGS:
            v = _make_var(tf, st, 1.0, sync, agg)
            rec = {"variable": _var_info(v), "state": _var_state(tf, st, v),
                   "repr": repr(v)}

            @tf.function
            def rd():
                return st.run(lambda: tf.identity(v))
            rec["read_in_replica"] = attempt(lambda: list(st.experimental_local_results(rd())))
            out["%s_%s" % (sync.lower(), agg.lower())] = rec
    return out


# ---------------------------------------------------------------- merge_call

@scenario("merge_call_seed", devices=(1, 2, 4))
def merge_call_seed(tf, n):
    """Seed 004 call_for_each_replica example, exactly: merge_fn(distribution,
    three_plus_replica_id) returns sum(experimental_local_results(...)); fn(three):
    v = three + replica_id_in_sync_group; s = merge_call(merge_fn, args=(v,));
    return s + v; with distribution.scope(): merged_results = distribution.run(fn,
    args=[3]); print(experimental_local_results(merged_results)). Run eagerly and in a
    tf.function, plus extended.call_for_each_replica, plus variations: merge_fn
    returning its per-replica argument, merge_call kwargs, nested merge_call."""
    distribution = mirrored(tf, n)
    out = {}

    def merge_fn(distribution, three_plus_replica_id):
        return sum(distribution.experimental_local_results(three_plus_replica_id))

    def fn(three):
        replica_ctx = tf.distribute.get_replica_context()
        v = three + replica_ctx.replica_id_in_sync_group
        s = replica_ctx.merge_call(merge_fn, args=(v,))
        return s + v

    with distribution.scope():
        try:
            merged_results = distribution.run(fn, args=[3])
            out["eager"] = dv_rec(distribution, merged_results)
            out["eager"]["printed"] = str(distribution.experimental_local_results(merged_results))
        except Exception as e:  # noqa: BLE001
            out["eager"] = err(e)
        try:
            merged_results = tf.function(lambda: distribution.run(fn, args=[3]))()
            out["tf_function"] = dv_rec(distribution, merged_results)
        except Exception as e:  # noqa: BLE001
            out["tf_function"] = err(e)
        try:
            merged_results = distribution.extended.call_for_each_replica(fn, args=[3])
            out["extended_call_for_each_replica"] = dv_rec(distribution, merged_results)
        except Exception as e:  # noqa: BLE001
            out["extended_call_for_each_replica"] = err(e)

    def ret_arg(strategy, x):
        return x

    def fn_ret_arg():
        ctx = tf.distribute.get_replica_context()
        v = tf.cast(ctx.replica_id_in_sync_group, tf.float32) * 10.0
        return ctx.merge_call(ret_arg, args=(v,))

    def merge_kw(strategy, a, b=None):
        return strategy.reduce("SUM", a, axis=None) + b

    def fn_kw():
        ctx = tf.distribute.get_replica_context()
        v = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
        # b: the same Python float on every replica (a tf.constant made per replica
        # would arrive in merge_fn as a PerReplica)
        return ctx.merge_call(merge_kw, args=(v,), kwargs={"b": 100.0})

    def fn_kw_tensor():
        ctx = tf.distribute.get_replica_context()
        return ctx.merge_call(lambda strategy, b=None: {"b_type": type(b).__name__},
                              kwargs={"b": tf.constant(100.0)})

    def inner(strategy):
        return tf.distribute.get_replica_context().merge_call(lambda s: 1.0)

    def fn_nested():
        return tf.distribute.get_replica_context().merge_call(inner)

    def merge_ctx(strategy):
        return {"in_cross_replica_context": tf.distribute.in_cross_replica_context(),
                "replica_context_is_none": tf.distribute.get_replica_context() is None}

    def fn_ctx():
        return tf.distribute.get_replica_context().merge_call(merge_ctx)

    try:
        out["merge_call_kwarg_tensor_made_per_replica_arrives_as"] = enc(distribution.run(fn_kw_tensor))
    except Exception as e:  # noqa: BLE001
        out["merge_call_kwarg_tensor_made_per_replica_arrives_as"] = err(e)
    for name, f in (("merge_fn_returns_per_replica_arg", fn_ret_arg),
                    ("merge_call_kwargs_reduce_sum_plus_b", fn_kw),
                    ("nested_merge_call", fn_nested)):
        for mode in ("eager", "tf_function"):
            try:
                r = distribution.run(f) if mode == "eager" else tf.function(lambda: distribution.run(f))()
                out["%s_%s" % (name, mode)] = dv_rec(distribution, r)
            except Exception as e:  # noqa: BLE001
                out["%s_%s" % (name, mode)] = err(e)
    try:
        r = distribution.run(fn_ctx)
        out["merge_fn_context"] = enc(r)
    except Exception as e:  # noqa: BLE001
        out["merge_fn_context"] = err(e)
    return out


# ---------------------------------------------------------------- StrategyExtended

@scenario("extended_ops", devices=(2, 4))
def extended_ops(tf, n):
    """StrategyExtended (seed 002/004) in cross-replica context: reduce_to SUM/MEAN
    with destinations = the per-replica value / a mirrored variable / a device string;
    reduce_to of a plain tensor; batch_reduce_to; broadcast_to; update (group True/False,
    Mirrored / PerReplica args); the colocate_vars_with example (update(var1, fn,
    args=(var2, var3))); read_var; value_container; variable_created_in_scope;
    non_slot_devices / update_non_slot; attributes."""
    st = mirrored(tf, n)
    ext = st.extended
    R = tf.distribute.ReduceOp
    out = {}
    pr = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
    pr2 = st.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([1.0, 10.0]) * float(ctx.replica_id_in_sync_group + 1))
    out["inputs"] = {"pr": local(st, pr), "pr2": local(st, pr2)}
    with st.scope():
        mv = tf.Variable(0.0)
        mv2 = tf.Variable([0.0, 0.0])

    def rec(x):
        return {"type": type(x).__name__, "value": enc(x)}

    def tryrec(f):
        try:
            return rec(f())
        except Exception as e:  # noqa: BLE001
            return err(e)

    out["reduce_to_SUM_dest_self"] = tryrec(lambda: ext.reduce_to(R.SUM, pr, destinations=pr))
    out["reduce_to_MEAN_dest_self"] = tryrec(lambda: ext.reduce_to(R.MEAN, pr, destinations=pr))
    out["reduce_to_SUM_dest_var"] = tryrec(lambda: ext.reduce_to(R.SUM, pr, destinations=mv))
    out["reduce_to_SUM_dest_device_string"] = tryrec(lambda: ext.reduce_to(R.SUM, pr, destinations="/cpu:0"))
    out["reduce_to_SUM_plain_tensor"] = tryrec(lambda: ext.reduce_to(R.SUM, tf.constant(3.0), destinations=mv))
    out["reduce_to_MEAN_plain_tensor"] = tryrec(lambda: ext.reduce_to(R.MEAN, tf.constant(3.0), destinations=mv))
    out["reduce_to_variable_aggregation_SUM"] = tryrec(
        lambda: ext.reduce_to(tf.VariableAggregation.SUM, pr, destinations=mv))
    out["batch_reduce_to_SUM"] = tryrec(lambda: ext.batch_reduce_to(R.SUM, [(pr, mv), (pr2, mv2)]))
    out["batch_reduce_to_MEAN"] = tryrec(lambda: ext.batch_reduce_to(R.MEAN, [(pr, pr), (pr2, pr2)]))
    out["broadcast_to_var"] = tryrec(lambda: ext.broadcast_to(tf.constant(3.0), destinations=mv))
    out["broadcast_to_per_replica_dest"] = tryrec(lambda: ext.broadcast_to(tf.constant([3.0, 4.0]), destinations=pr2))

    with st.scope():
        u = tf.Variable(1.0)
    out["update_group_true"] = tryrec(
        lambda: ext.update(u, lambda var, x: var.assign_add(x), args=(tf.constant(2.0),)))
    out["update_group_true_after"] = enc(u)
    out["update_group_false"] = tryrec(
        lambda: ext.update(u, lambda var, x: var.assign_add(x), args=(tf.constant(2.0),), group=False))
    out["update_group_false_after"] = enc(u)
    reduced = ext.reduce_to(R.SUM, pr, destinations=u)
    out["update_with_mirrored_arg"] = tryrec(
        lambda: ext.update(u, lambda var, x: var.assign_sub(x), args=(reduced,)))
    out["update_with_mirrored_arg_after"] = enc(u)
    out["update_with_per_replica_arg"] = tryrec(
        lambda: ext.update(u, lambda var, x: var.assign(x), args=(pr,)))
    out["update_with_per_replica_arg_after"] = enc(u)

    # seed 002 colocate_vars_with example
    with st.scope():
        var1 = tf.Variable(0.0)
        with ext.colocate_vars_with(var1):
            var2 = tf.Variable(2.0)
            var3 = tf.Variable(3.0)

    def fn(v1, v2, v3):
        return v1.assign(v2 + v3)
    out["colocate_types"] = [type(var2).__name__, type(var3).__name__]
    out["colocate_devices"] = [list(var1._devices) if hasattr(var1, "_devices") else None,
                               list(var2._devices) if hasattr(var2, "_devices") else None]
    with st.scope():
        out["colocate_update"] = tryrec(lambda: ext.update(var1, fn, args=(var2, var3)))
    out["colocate_update_after"] = enc(var1)

    with st.scope():
        sv = tf.Variable(0.0, synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)
    st.run(tf.function(lambda: sv.assign(
        tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0)))
    out["sum_on_read_values"] = enc(sv)
    with st.scope():
        out["read_var_sum_on_read"] = attempt(ext.read_var, sv)
        out["read_var_mirrored"] = attempt(ext.read_var, u)
    out["value_container_is_var"] = [ext.value_container(c) is sv for c in sv.values]
    out["value_container_of_plain_tensor_is_itself"] = (lambda t: ext.value_container(t) is t)(tf.constant(1.0))
    plain = tf.Variable(1.0)
    out["variable_created_in_scope"] = {"in_scope_var": ext.variable_created_in_scope(mv),
                                        "plain_var": ext.variable_created_in_scope(plain)}
    try:
        nsd = ext.non_slot_devices([mv])
        out["non_slot_devices"] = repr(nsd)
        with st.scope():
            with ext.colocate_vars_with(mv):
                it = tf.Variable(0, dtype=tf.int64)
            out["update_non_slot"] = tryrec(lambda: ext.update_non_slot(nsd, lambda: it.assign_add(1)))
        out["update_non_slot_after"] = enc(it)
    except Exception as e:  # noqa: BLE001
        out["non_slot_devices"] = err(e)
    out["attributes"] = {
        "worker_devices": list(ext.worker_devices),
        "parameter_devices": list(ext.parameter_devices),
        "experimental_require_static_shapes": ext.experimental_require_static_shapes,
        "experimental_between_graph": ext.experimental_between_graph,
        "should_checkpoint": ext.should_checkpoint,
        "should_save_summary": ext.should_save_summary,
        "experimental_should_init": ext.experimental_should_init,
    }
    return out


@scenario("update_pattern", devices=(2, 4))
def update_pattern(tf, n):
    """The seed's standard update recipe inside strategy.run (tf.function): per
    replica grad g = replica_id+1 (and [g, 10g]); merge_call(merge_fn, args=(grads,));
    merge_fn: reduce_to(SUM, g, destinations=var) / batch_reduce_to(SUM, pairs) then
    extended.update(var, lambda v, t: v.assign_sub(t), args=(reduced,)). Variables are
    plain mirrored (aggregation NONE), init 10.0 and [10., 100.]."""
    st = mirrored(tf, n)
    R = tf.distribute.ReduceOp
    out = {}
    with st.scope():
        a = tf.Variable(10.0)
        b = tf.Variable([10.0, 100.0])

    def grads():
        g = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0
        return g, tf.stack([g, 10.0 * g])

    def merge_single(strategy, g):
        reduced = strategy.extended.reduce_to(R.SUM, g, destinations=a)
        return strategy.extended.update(a, lambda v, t: v.assign_sub(t), args=(reduced,))

    def step_single():
        ga, _ = grads()
        r = tf.distribute.get_replica_context().merge_call(merge_single, args=(ga,))
        return tf.identity(r)

    try:
        r = tf.function(lambda: st.run(step_single))()
        out["reduce_to_update"] = {"returned": local(st, r), "var_after": enc(a)}
    except Exception as e:  # noqa: BLE001
        out["reduce_to_update"] = err(e)

    def merge_batch(strategy, ga, gb):
        reduced = strategy.extended.batch_reduce_to(R.SUM, [(ga, a), (gb, b)])
        for v, t in zip((a, b), reduced):
            strategy.extended.update(v, lambda var, x: var.assign_sub(x), args=(t,), group=False)
        return None

    def step_batch():
        ga, gb = grads()
        tf.distribute.get_replica_context().merge_call(merge_batch, args=(ga, gb))
        return tf.constant(0)

    try:
        tf.function(lambda: st.run(step_batch))()
        out["batch_reduce_to_update"] = {"a_after": enc(a), "b_after": enc(b)}
    except Exception as e:  # noqa: BLE001
        out["batch_reduce_to_update"] = err(e)
    try:
        st.run(step_batch)
        out["batch_reduce_to_update_eager_again"] = {"a_after": enc(a), "b_after": enc(b)}
    except Exception as e:  # noqa: BLE001
        out["batch_reduce_to_update_eager_again"] = err(e)
    return out


# ---------------------------------------------------------------- checkpoints

def _ckpt_save(tf, _n):
    n = int(os.environ["CKPT_SAVE_N"])
    _common._tf = None
    tf = setup(n)
    st = mirrored(tf, n)
    sync, agg = os.environ["CKPT_SYNC"], os.environ["CKPT_AGG"]
    v = _make_var(tf, st, 0.0, sync, agg)

    def fn():
        r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0
        if sync == "ON_READ":
            return v.assign(r)
        return v.assign(tf.distribute.get_replica_context().all_reduce("SUM", r))
    st.run(tf.function(fn))
    ckpt = tf.train.Checkpoint(v=v)
    path = ckpt.save(os.path.join(os.environ["CKPT_DIR"], "ckpt"))
    reader = tf.train.load_checkpoint(path)
    stored = {k: enc(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()
              if k.startswith("v/")}
    return {"path_basename": os.path.basename(path), "variable": _var_info(v),
            "values_at_save": _var_state(tf, st, v), "stored_in_checkpoint": stored,
            "path": path}


def _ckpt_restore(tf, _n):
    n = int(os.environ["CKPT_RESTORE_N"])
    tf = setup(n)
    st = mirrored(tf, n)
    sync, agg = os.environ["CKPT_SYNC"], os.environ["CKPT_AGG"]
    v = _make_var(tf, st, 0.0, sync, agg)
    before = _var_state(tf, st, v)
    status = tf.train.Checkpoint(v=v).restore(os.environ["CKPT_PATH"])
    out = {"variable": _var_info(v), "before_restore": before}
    try:
        status.assert_consumed()
        out["assert_consumed"] = "ok"
    except Exception as e:  # noqa: BLE001
        out["assert_consumed"] = err(e)
    out["after_restore"] = _var_state(tf, st, v)
    return out


# hidden children (devices come from the environment)
_common._SCENARIOS["_ckpt_save"] = dict(fn=lambda tf, n: _ckpt_save(tf, n), devices=None, doc="")
_common._SCENARIOS["_ckpt_restore"] = dict(fn=lambda tf, n: _ckpt_restore(tf, n), devices=None, doc="")


def _checkpoint(sync, agg, save_n, restore_n):
    with tempfile.TemporaryDirectory() as d:
        env = {"CKPT_DIR": d, "CKPT_SYNC": sync, "CKPT_AGG": agg,
               "CKPT_SAVE_N": str(save_n), "CKPT_RESTORE_N": str(restore_n)}
        me = os.path.abspath(__file__)
        saved = run_child(me, "_ckpt_save", env)
        res = saved.get("result", {})
        if "path" not in res:
            return {"save": res}
        env["CKPT_PATH"] = res.pop("path")
        restored = run_child(me, "_ckpt_restore", env)
        return {"save_devices": save_n, "restore_devices": restore_n,
                "save": res, "restore": restored.get("result"),
                "num_devices_used": [save_n, restore_n],
                "tf_version": saved.get("tf_version")}


for _sync, _agg in (("ON_READ", "SUM"), ("ON_READ", "MEAN"), ("ON_READ", "ONLY_FIRST_REPLICA"),
                    ("ON_WRITE", "NONE"), ("ON_WRITE", "SUM")):
    for _s, _r in ((2, 4), (4, 2), (2, 1), (2, 2)):
        def _mkc(sync, agg, s, r):
            def f(_tf, _n):
                return _checkpoint(sync, agg, s, r)
            f.__doc__ = (
                "Checkpoint rule: a %s/%s variable (init 0.0) on %d replicas gets per-replica "
                "values (ON_READ: replica_id+1 assigned in replica context; ON_WRITE: the "
                "all-reduced sum of replica_id+1), is saved with tf.train.Checkpoint, then "
                "restored in a separate process into a fresh variable of the same kind on %d "
                "replicas. Records the saved component values, the tensor stored in the "
                "checkpoint and the per-replica values after restore." % (sync, agg, s, r))
            scenario("checkpoint_%s_%s_%dto%d" % (sync.lower(), agg.lower(), s, r), devices=None)(f)
        _mkc(_sync, _agg, _s, _r)


if __name__ == "__main__":
    sys.exit(main())
