"""Every public function and argument, given a wrong type or an out-of-range value, raises the
promised error: a strategax error of the matching Python type whose message names the line of
the call (here, the line of each table row) and says how to fix it — never a raw internal error
and never an answer. `test_every_public_argument_is_walked` keeps the table complete: each
parameter of the public API is either exercised below or listed in EXEMPT with the reason."""
import inspect
import json
import pathlib

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import assert_names_this_line, here

import strategax as sx
from strategax.distribute.tpu_strategy import DeviceAssignment

S = sx.MirroredStrategy(["CPU:0", "CPU:1"])
T = sx.TPUStrategy(["CPU:0", "CPU:1"], logical_devices_per_replica=2)
PR = S.experimental_distribute_values_from_function(lambda ctx: jnp.ones(3) * ctx.replica_id_in_sync_group)
with S.scope():
    V = sx.Variable(jnp.ones(3))
    OPT = sx.Optimizer(optax.sgd(0.1))
    SCALED = sx.Optimizer(optax.sgd(0.1), loss_scale="dynamic")
W = object()  # a value of no type any argument takes
VE, TE, RE = ValueError, TypeError, RuntimeError


def _ds():
    return S.experimental_distribute_dataset([np.ones(4, np.float32)])


CASES = []


def case(api: str, arg: str, bad, error, call, line: int) -> None:
    CASES.append(pytest.param(api, arg, bad, error, call, line, id=f"{api}:{arg}={bad!r:.20}"))


# Strategies
case("MirroredStrategy", "devices", W, TE, lambda b: sx.MirroredStrategy(b), here())
case("MirroredStrategy", "devices", 5, TE, lambda b: sx.MirroredStrategy(b), here())
case("MirroredStrategy", "devices", ["CPU:99"], VE, lambda b: sx.MirroredStrategy(b), here())
case("MirroredStrategy", "devices", ["banana"], VE, lambda b: sx.MirroredStrategy(b), here())
case("MirroredStrategy", "devices", [], VE, lambda b: sx.MirroredStrategy(b), here())
case("OneDeviceStrategy", "device", W, VE, lambda b: sx.OneDeviceStrategy(b), here())
case("OneDeviceStrategy", "device", "CPU:99", VE, lambda b: sx.OneDeviceStrategy(b), here())
case("TPUStrategy", "logical_devices_per_replica", "2", VE, lambda b: sx.TPUStrategy(logical_devices_per_replica=b), here())
case("TPUStrategy", "logical_devices_per_replica", 0, VE, lambda b: sx.TPUStrategy(logical_devices_per_replica=b), here())
case("TPUStrategy", "logical_devices_per_replica", 3, VE, lambda b: sx.TPUStrategy(logical_devices_per_replica=b), here())
case("TPUStrategy", "experimental_device_assignment", 3, TE, lambda b: sx.TPUStrategy(experimental_device_assignment=b), here())
case("CentralStorageStrategy", "compute_devices", 5, TE, lambda b: sx.CentralStorageStrategy(b), here())
case("CentralStorageStrategy", "parameter_device", "CPU:99", VE, lambda b: sx.CentralStorageStrategy(["CPU:0"], b), here())
case("MultiWorkerMirroredStrategy", "cluster_resolver", 3, VE, lambda b: sx.MultiWorkerMirroredStrategy(b), here())
case("MultiWorkerMirroredStrategy", "join_timeout_seconds", 0, VE, lambda b: sx.MultiWorkerMirroredStrategy(join_timeout_seconds=b), here())
case("MultiWorkerMirroredStrategy", "join_timeout_seconds", "10", TE, lambda b: sx.MultiWorkerMirroredStrategy(join_timeout_seconds=b), here())
case("MultiWorkerMirroredStrategy", "heartbeat_timeout_seconds", -1.5, VE, lambda b: sx.MultiWorkerMirroredStrategy(heartbeat_timeout_seconds=b), here())
case("MultiWorkerMirroredStrategy", "heartbeat_timeout_seconds", True, TE, lambda b: sx.MultiWorkerMirroredStrategy(heartbeat_timeout_seconds=b), here())
case("DeviceAssignment.build", "computation_shape", 3, TE, lambda b: DeviceAssignment.build(computation_shape=b, num_replicas=2), here())
case("DeviceAssignment.build", "computation_shape", [0], VE, lambda b: DeviceAssignment.build(computation_shape=b, num_replicas=2), here())
case("DeviceAssignment.build", "num_replicas", "2", TE, lambda b: DeviceAssignment.build(computation_shape=[1], num_replicas=b), here())
case("DeviceAssignment.build", "num_replicas", 0, VE, lambda b: DeviceAssignment.build(computation_shape=[1], num_replicas=b), here())

# Strategy methods
case("Strategy.run", "fn", 3, TE, lambda b: S.run(b), here())
case("Strategy.run", "args", 3, TE, lambda b: S.run(lambda *a: 1.0, args=b), here())
case("Strategy.run", "kwargs", [1], TE, lambda b: S.run(lambda **k: 1.0, kwargs=b), here())
case("Strategy.run", "options", 3, TE, lambda b: S.run(lambda: 1.0, options=b), here())
case("Strategy.reduce", "reduce_op", "max", VE, lambda b: S.reduce(b, PR), here())
case("Strategy.reduce", "reduce_op", 3, VE, lambda b: S.reduce(b, PR), here())
case("Strategy.reduce", "value", "abc", TE, lambda b: S.reduce("MEAN", b), here())
case("Strategy.reduce", "value", W, TE, lambda b: S.reduce("MEAN", {"a": b}), here())
case("Strategy.reduce", "axis", "0", TE, lambda b: S.reduce("SUM", PR, axis=b), here())
case("Strategy.reduce", "axis", 1.0, TE, lambda b: S.reduce("SUM", PR, axis=b), here())
case("Strategy.reduce", "axis", True, TE, lambda b: S.reduce("SUM", PR, axis=b), here())
case("Strategy.reduce", "axis", 5, VE, lambda b: S.reduce("SUM", PR, axis=b), here())
case("Strategy.reduce", "axis", -2, VE, lambda b: S.reduce("SUM", PR, axis=b), here())
case("Strategy.gather", "value", "abc", TE, lambda b: S.gather(b, 0), here())
case("Strategy.gather", "axis", "0", TE, lambda b: S.gather(PR, b), here())
case("Strategy.gather", "axis", None, TE, lambda b: S.gather(PR, b), here())
case("Strategy.gather", "axis", 1, VE, lambda b: S.gather(PR, b), here())
case("Strategy.function", "fn", 5, TE, lambda b: S.function(b), here())
case("Strategy.function", "name", 5, TE, lambda b: S.function(lambda: 1.0, name=b), here())
case("Strategy.function", "reduce_retracing", "yes", TE, lambda b: S.function(lambda: 1.0, reduce_retracing=b), here())
case("Strategy.function", "input_signature", 3, TE, lambda b: S.function(lambda: 1.0, input_signature=b), here())
case("Strategy.function", "input_signature", [W], TE, lambda b: S.function(lambda: 1.0, input_signature=b), here())
case("Strategy.experimental_distribute_dataset", "dataset", 5, TE, lambda b: S.experimental_distribute_dataset(b), here())
case("Strategy.experimental_distribute_dataset", "options", 5, TE, lambda b: S.experimental_distribute_dataset([np.ones(4)], b), here())
case("Strategy.distribute_datasets_from_function", "dataset_fn", 5, TE, lambda b: S.distribute_datasets_from_function(b), here())
case("Strategy.distribute_datasets_from_function", "dataset_fn", lambda c: 5, TE, lambda b: S.distribute_datasets_from_function(b), here())
case("Strategy.distribute_datasets_from_function", "options", W, TE, lambda b: S.distribute_datasets_from_function(lambda c: [np.ones(2)], b), here())
case("Strategy.experimental_distribute_datasets_from_function", "dataset_fn", 5, TE, lambda b: S.experimental_distribute_datasets_from_function(b), here())
case("Strategy.experimental_distribute_datasets_from_function", "options", 5, TE, lambda b: S.experimental_distribute_datasets_from_function(lambda c: [np.ones(2)], b), here())
case("Strategy.experimental_distribute_values_from_function", "value_fn", 5, TE, lambda b: S.experimental_distribute_values_from_function(b), here())
case("Strategy.experimental_distribute_values_from_function", "value_fn", lambda c: W, TE, lambda b: S.experimental_distribute_values_from_function(b), here())
case("Strategy.experimental_make_numpy_dataset", "numpy_input", "ab", VE, lambda b: S.experimental_make_numpy_dataset(b), here())
case("Strategy.experimental_split_to_logical_devices", "tensor", W, TE, lambda b: T.experimental_split_to_logical_devices(b, [2]), here())
case("Strategy.experimental_split_to_logical_devices", "partition_dimensions", ["2"], TE, lambda b: T.experimental_split_to_logical_devices(jnp.ones(4), b), here())
case("Strategy.experimental_split_to_logical_devices", "partition_dimensions", [3], VE, lambda b: T.experimental_split_to_logical_devices(jnp.ones(4), b), here())
case("Strategy.experimental_assign_to_logical_device", "tensor", W, TE, lambda b: T.experimental_assign_to_logical_device(b, 0), here())
case("Strategy.experimental_assign_to_logical_device", "logical_device_id", "0", TE, lambda b: T.experimental_assign_to_logical_device(jnp.ones(4), b), here())
case("Strategy.experimental_assign_to_logical_device", "logical_device_id", 5, VE, lambda b: T.experimental_assign_to_logical_device(jnp.ones(4), b), here())
case("Strategy.experimental_replicate_to_logical_devices", "tensor", W, TE, lambda b: T.experimental_replicate_to_logical_devices(b), here())

# StrategyExtended
case("StrategyExtended.reduce_to", "reduce_op", "max", VE, lambda b: S.extended.reduce_to(b, PR, V), here())
case("StrategyExtended.reduce_to", "value", "abc", TE, lambda b: S.extended.reduce_to("MEAN", b, V), here())
case("StrategyExtended.reduce_to", "options", 3, TE, lambda b: S.extended.reduce_to("SUM", PR, V, b), here())
case("StrategyExtended.batch_reduce_to", "reduce_op", 3, VE, lambda b: S.extended.batch_reduce_to(b, [(PR, V)]), here())
case("StrategyExtended.batch_reduce_to", "value_destination_pairs", 3, TE, lambda b: S.extended.batch_reduce_to("SUM", b), here())
case("StrategyExtended.batch_reduce_to", "value_destination_pairs", [(PR,)], TE, lambda b: S.extended.batch_reduce_to("SUM", b), here())
case("StrategyExtended.batch_reduce_to", "options", W, TE, lambda b: S.extended.batch_reduce_to("SUM", [(PR, V)], b), here())
case("StrategyExtended.broadcast_to", "tensor", W, TE, lambda b: S.extended.broadcast_to(b, None), here())
case("StrategyExtended.update", "var", 3, TE, lambda b: S.extended.update(b, lambda x: x), here())
case("StrategyExtended.update", "fn", 3, TE, lambda b: S.extended.update(V, b), here())
case("StrategyExtended.update", "args", 3, TE, lambda b: S.extended.update(V, lambda x, *a: x.read_value(), args=b), here())
case("StrategyExtended.update", "kwargs", [1], TE, lambda b: S.extended.update(V, lambda x: x.read_value(), kwargs=b), here())
case("StrategyExtended.update", "group", "no", TE, lambda b: S.extended.update(V, lambda x: x.read_value(), group=b), here())
case("StrategyExtended.update_non_slot", "fn", 3, TE, lambda b: S.extended.update_non_slot(V, b), here())
case("StrategyExtended.update_non_slot", "args", 3, TE, lambda b: S.extended.update_non_slot(V, lambda *a: 1.0, args=b), here())
case("StrategyExtended.call_for_each_replica", "fn", 3, TE, lambda b: S.extended.call_for_each_replica(b), here())
case("StrategyExtended.call_for_each_replica", "args", 3, TE, lambda b: S.extended.call_for_each_replica(lambda *a: 1.0, b), here())
case("StrategyExtended.call_for_each_replica", "kwargs", 3, TE, lambda b: S.extended.call_for_each_replica(lambda **k: 1.0, (), b), here())
case("StrategyExtended.read_var", "v", 3, TE, lambda b: S.extended.read_var(b), here())
case("StrategyExtended.experimental_run_steps_on_iterator", "fn", 3, TE, lambda b: S.extended.experimental_run_steps_on_iterator(b, iter(_ds())), here())
case("StrategyExtended.experimental_run_steps_on_iterator", "iterations", "2", TE, lambda b: S.extended.experimental_run_steps_on_iterator(lambda c, x: None, iter(_ds()), b), here())
case("StrategyExtended.experimental_run_steps_on_iterator", "iterations", 0, VE, lambda b: S.extended.experimental_run_steps_on_iterator(lambda c, x: None, iter(_ds()), b), here())

# ReplicaContext (inside run: the error names the replica function's line, this row)
case("ReplicaContext.all_reduce", "reduce_op", "max", VE, lambda b: S.run(lambda: sx.get_replica_context().all_reduce(b, 1.0)), here())
case("ReplicaContext.all_reduce", "value", "abc", TE, lambda b: S.run(lambda: sx.get_replica_context().all_reduce("SUM", b)), here())
case("ReplicaContext.all_reduce", "options", 3, TE, lambda b: S.run(lambda: sx.get_replica_context().all_reduce("SUM", 1.0, options=b)), here())
case("ReplicaContext.all_gather", "axis", "0", TE, lambda b: S.run(lambda: sx.get_replica_context().all_gather(jnp.ones(2), b)), here())
case("ReplicaContext.all_gather", "axis", 3, VE, lambda b: S.run(lambda: sx.get_replica_context().all_gather(jnp.ones(2), b)), here())
case("ReplicaContext.all_gather", "value", jnp.float32(1.0), VE, lambda b: S.run(lambda: sx.get_replica_context().all_gather(b, 0)), here())
case("ReplicaContext.merge_call", "merge_fn", 3, TE, lambda b: S.run(lambda: sx.get_replica_context().merge_call(b)), here())
case("ReplicaContext.merge_call", "args", 3, TE, lambda b: S.run(lambda: sx.get_replica_context().merge_call(lambda s, *a: 1.0, args=b)), here())
case("ReplicaContext.merge_call", "kwargs", [1], TE, lambda b: S.run(lambda: sx.get_replica_context().merge_call(lambda s: 1.0, kwargs=b)), here())

# Values, contexts, options
case("PerReplica", "values", 5, TE, lambda b: sx.PerReplica(b), here())
case("PerReplica", "values", [], VE, lambda b: sx.PerReplica(b), here())
case("PerReplica", "values", [None, 1.0], VE, lambda b: sx.PerReplica(b), here())
case("Mirrored", "values", W, TE, lambda b: sx.Mirrored(b), here())
case("ValueContext", "replica_id_in_sync_group", "0", TE, lambda b: sx.ValueContext(b, 2), here())
case("ValueContext", "replica_id_in_sync_group", 5, VE, lambda b: sx.ValueContext(b, 2), here())
case("ValueContext", "num_replicas_in_sync", 0, VE, lambda b: sx.ValueContext(0, b), here())
case("InputContext", "num_input_pipelines", "1", TE, lambda b: sx.InputContext(num_input_pipelines=b), here())
case("InputContext", "input_pipeline_id", 3, VE, lambda b: sx.InputContext(input_pipeline_id=b), here())
case("InputContext", "num_replicas_in_sync", 0, VE, lambda b: sx.InputContext(num_replicas_in_sync=b), here())
case("InputContext.get_per_replica_batch_size", "global_batch_size", "8", TE, lambda b: sx.InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(b), here())
case("InputContext.get_per_replica_batch_size", "global_batch_size", 3, VE, lambda b: sx.InputContext(num_replicas_in_sync=2).get_per_replica_batch_size(b), here())
case("InputOptions", "experimental_fetch_to_device", "x", TE, lambda b: sx.InputOptions(experimental_fetch_to_device=b), here())
case("InputOptions", "experimental_place_dataset_on_device", 1, TE, lambda b: sx.InputOptions(experimental_place_dataset_on_device=b), here())
case("InputOptions", "experimental_per_replica_buffer_size", 1.5, TE, lambda b: sx.InputOptions(experimental_per_replica_buffer_size=b), here())
case("InputOptions", "experimental_per_replica_buffer_size", 0, VE, lambda b: sx.InputOptions(experimental_per_replica_buffer_size=b), here())
case("InputOptions", "auto_shard_policy", "x", VE, lambda b: sx.InputOptions(auto_shard_policy=b), here())
case("CommunicationOptions", "bytes_per_pack", "1", TE, lambda b: sx.CommunicationOptions(bytes_per_pack=b), here())
case("CommunicationOptions", "bytes_per_pack", -1, VE, lambda b: sx.CommunicationOptions(bytes_per_pack=b), here())
case("CommunicationOptions", "timeout_seconds", "1", TE, lambda b: sx.CommunicationOptions(timeout_seconds=b), here())
case("CommunicationOptions", "timeout_seconds", -1, VE, lambda b: sx.CommunicationOptions(timeout_seconds=b), here())
case("CommunicationOptions", "implementation", "x", VE, lambda b: sx.CommunicationOptions(implementation=b), here())
case("CommunicationOptions", "implementation", 9, TE, lambda b: sx.CommunicationOptions(implementation=b), here())
case("CommunicationOptions", "compression", "int8", VE, lambda b: sx.CommunicationOptions(compression=b), here())
case("CommunicationOptions", "compression", 16, TE, lambda b: sx.CommunicationOptions(compression=b), here())
case("MirroredStrategy", "communication_options", 3, TE, lambda b: sx.MirroredStrategy(["CPU:0"], communication_options=b), here())
case("MultiWorkerMirroredStrategy", "communication_options", 3, TE, lambda b: sx.MultiWorkerMirroredStrategy(sx.cluster_resolver.SimpleClusterResolver(sx.cluster_resolver.ClusterSpec({"worker": ["localhost:1"]}), task_type="worker", task_id=0), b), here())
case("experimental_set_strategy", "strategy", 3, TE, lambda b: sx.experimental_set_strategy(b), here())
case("ReduceOp.parse", "op", "max", VE, lambda b: sx.ReduceOp.parse(b), here())
case("range", "start", "3", TE, lambda b: sx.range(b), here())
case("range", "stop", 1.5, TE, lambda b: sx.range(0, b), here())
case("range", "step", 0, VE, lambda b: sx.range(0, 3, b), here())

# Variables and optimizers
case("Variable", "initial_value", "abc", TE, lambda b: sx.Variable(b), here())
case("Variable", "initial_value", None, TE, lambda b: sx.Variable(b), here())
case("Variable", "trainable", "yes", TE, lambda b: sx.Variable(1.0, trainable=b), here())
case("Variable", "name", 5, TE, lambda b: sx.Variable(1.0, name=b), here())
case("Variable", "dtype", "floaty", TE, lambda b: sx.Variable(1.0, dtype=b), here())
case("Variable", "synchronization", "x", VE, lambda b: sx.Variable(1.0, synchronization=b), here())
case("Variable", "synchronization", 2.5, TE, lambda b: sx.Variable(1.0, synchronization=b), here())
case("Variable", "aggregation", "max", VE, lambda b: sx.Variable(1.0, aggregation=b), here())
case("Variable", "aggregation", 9, VE, lambda b: sx.Variable(1.0, aggregation=b), here())
case("Variable.assign", "value", "abc", TE, lambda b: V.assign(b), here())
case("Variable.assign", "value", None, TE, lambda b: V.assign(b), here())
case("Variable.assign", "value", jnp.ones(4), VE, lambda b: V.assign(b), here())
case("Variable.assign_add", "delta", W, TE, lambda b: V.assign_add(b), here())
case("Variable.assign_add", "delta", 1.0, VE, lambda b: V.assign_add(b), here())
case("Variable.assign_sub", "delta", [1.0, 2.0], VE, lambda b: V.assign_sub(b), here())
case("Optimizer", "tx", 3, VE, lambda b: sx.Optimizer(b), here())
case("Optimizer.apply_gradients", "grads_and_vars", 3, TE, lambda b: OPT.apply_gradients(b), here())
case("Optimizer.apply_gradients", "grads_and_vars", [(jnp.ones(3), W)], TE, lambda b: OPT.apply_gradients(b), here())
case("Optimizer", "shard_state", "yes", TE, lambda b: sx.Optimizer(optax.sgd(0.1), shard_state=b), here())
case("Optimizer", "loss_scale", W, TE, lambda b: sx.Optimizer(optax.sgd(0.1), loss_scale=b), here())
case("Optimizer", "loss_scale", True, TE, lambda b: sx.Optimizer(optax.sgd(0.1), loss_scale=b), here())
case("Optimizer", "loss_scale", "static", VE, lambda b: sx.Optimizer(optax.sgd(0.1), loss_scale=b), here())
case("Optimizer", "loss_scale", -1.0, VE, lambda b: sx.Optimizer(optax.sgd(0.1), loss_scale=b), here())
case("Optimizer", "loss_scale", float("inf"), VE, lambda b: sx.Optimizer(optax.sgd(0.1), loss_scale=b), here())
case("Optimizer.get_scaled_loss", "loss", "abc", TE, lambda b: SCALED.get_scaled_loss(b), here())
case("Optimizer.get_scaled_loss", "loss", jnp.ones(3), VE, lambda b: OPT.get_scaled_loss(b), here())
case("Optimizer.get_unscaled_gradients", "grads", [W], TE, lambda b: SCALED.get_unscaled_gradients(b), here())
case("Optimizer.get_unscaled_gradients", "grads", [jnp.ones(3)], VE, lambda b: OPT.get_unscaled_gradients(b), here())

# Checkpoints
case("Checkpoint", "objects", W, VE, lambda b: sx.Checkpoint(a=b), here())
case("Checkpoint.save", "file_prefix", 3, TE, lambda b: sx.Checkpoint(a=V).save(b), here())
case("Checkpoint.restore", "save_path", 3, TE, lambda b: sx.Checkpoint(a=V).restore(b), here())
case("CheckpointManager", "checkpoint", 3, VE, lambda b: sx.CheckpointManager(b, "unused"), here())
case("CheckpointManager", "directory", 3, TE, lambda b: sx.CheckpointManager(sx.Checkpoint(a=V), b), here())
case("CheckpointManager", "max_to_keep", 0, VE, lambda b: sx.CheckpointManager(sx.Checkpoint(a=V), "unused", max_to_keep=b), here())
case("latest_checkpoint", "directory", 3, TE, lambda b: sx.latest_checkpoint(b), here())

# Values no program can hold (issue 25): TensorFlow passes them through (tests/data/tf/gaps.json,
# hostile_inputs_r2); strategax compiles every call, so each raises naming the argument
F = S.function(lambda x: S.run(lambda y: y + 1, args=(x,)))
case("Strategy.run", "args", np.array(["a", "b"]), TE, lambda b: S.run(lambda x: x, args=(b,)), here())
case("Strategy.run", "args", np.array([W, 1], dtype=object), TE, lambda b: S.run(lambda x: x, args=(b,)), here())
case("Strategy.run", "args", sx.PerReplica(["a", "b"]), TE, lambda b: S.run(lambda x: x, args=(b,)), here())
case("Strategy.run", "args", 2 ** 40, VE, lambda b: S.run(lambda x: x + 1, args=(b,)), here())
case("Strategy.run", "fn", lambda: "abc", TE, lambda b: S.run(b), here())
case("Strategy.run", "fn", lambda: W, TE, lambda b: S.run(b), here())
case("Strategy.function", "args", 2 ** 40, VE, lambda b: F(b), here())
case("Strategy.function", "args", np.array(["a"]), TE, lambda b: F(b), here())
case("Strategy.experimental_distribute_dataset", "dataset", [np.array(["a", "b"])], TE,
     lambda b: next(iter(S.experimental_distribute_dataset(b))), here())
case("Strategy.experimental_distribute_dataset", "dataset", [{"x": np.ones(2), "s": np.array([W, W])}], TE,
     lambda b: next(iter(S.experimental_distribute_dataset(b))), here())
case("Strategy.distribute_datasets_from_function", "dataset_fn", lambda c: [np.array(["a"])], TE,
     lambda b: next(iter(S.distribute_datasets_from_function(b))), here())


@pytest.mark.parametrize("api,arg,bad,error,call,line", CASES)
def test_bad_argument_raises_the_promised_error(api, arg, bad, error, call, line):
    with pytest.raises(error) as e:
        call(bad)
    assert isinstance(e.value, sx.StrategaxError), f"{api}({arg}={bad!r}) raised a raw {type(e.value).__name__}"
    assert_names_this_line(e, line)


# Parameters that take any value by design (TensorFlow compatibility, or no wrong value exists).
EXEMPT = {
    "MirroredStrategy:cross_device_ops": "accepted for TensorFlow code and ignored (XLA picks the collectives)",
    "TPUStrategy:devices": "a non-list first argument is TensorFlow's TPUClusterResolver: local devices are used",
    "Strategy.experimental_local_results:value": "any value: a plain value gives a 1-tuple, as TensorFlow",
    "StrategyExtended.broadcast_to:destinations": "every replica's device is the destination",
    "StrategyExtended.reduce_to:destinations": "a variable, device string or distributed value: all mean every replica",
    "StrategyExtended.colocate_vars_with:variable": "variables live on every replica's device anyway",
    "StrategyExtended.non_slot_devices:var_list": "the answer is every replica's device whatever is passed",
    "StrategyExtended.value_container:value": "any value: one that is not a component is its own container",
    "StrategyExtended.variable_created_in_scope:v": "any value: a non-variable was not created in the scope",
    "StrategyExtended.experimental_run_steps_on_iterator:iterator": "next() on it is what the steps do",
    "StrategyExtended.experimental_run_steps_on_iterator:initial_loop_values": "TensorFlow 1's, ignored",
    "StrategyExtended.update_non_slot:colocate_with": "the non-slot state lives on every replica's device",
    "StrategyExtended.update_non_slot:kwargs": "checked like update's kwargs",
    "StrategyExtended.update_non_slot:group": "checked like update's group",
    "ReplicaContext.all_gather:options": "accepted for TensorFlow code (packing is set on reductions)",
    "Variable.assign:use_locking": "TensorFlow's, ignored", "Variable.assign:name": "TensorFlow's, ignored",
    "Variable.assign:read_value": "TensorFlow's, ignored", "Variable.assign_add:use_locking": "TensorFlow's, ignored",
    "Variable.assign_add:name": "TensorFlow's, ignored", "Variable.assign_add:read_value": "TensorFlow's, ignored",
    "Variable.assign_sub:use_locking": "TensorFlow's, ignored", "Variable.assign_sub:name": "TensorFlow's, ignored",
    "Variable.assign_sub:read_value": "TensorFlow's, ignored",
    "Optimizer:name": "a label only", "Optimizer.apply_gradients:options": "passed to batch_reduce_to, checked there",
    "Optimizer.defer_slots:variable": "internal protocol of slot creation",
    "Optimizer.defer_slots:values": "internal protocol of slot creation",
    "Optimizer.has_slots:variable": "any value: a non-variable has no slots",
    "Optimizer.slot_spec:variable": "internal protocol of slot creation",
    "InputOptions:experimental_replication_mode": "TensorFlow's, ignored (one input pipeline per worker)",
    "CheckpointManager:checkpoint_name": "checked by the checkpoint path rules (test_checkpoint_manager)",
    "CheckpointManager:step_counter": "checked with checkpoint_interval (test_checkpoint_manager)",
    "CheckpointManager:checkpoint_interval": "checked with step_counter (test_checkpoint_manager)",
    "CheckpointManager:init_fn": "called as given",
    "CheckpointManager:async_save": "any truth value",
    "CheckpointManager.save:checkpoint_number": "checked by the manager (test_checkpoint_manager)",
    "CheckpointManager.save:check_interval": "any truth value",
    "DeviceAssignment.build:topology": "ignored: any backend",
    "DeviceAssignment.build:computation_stride": "ignored: any backend",
}


def _public_parameters() -> set[str]:
    out = set()
    for cls in (sx.Strategy, sx.StrategyExtended, sx.ReplicaContext, sx.Variable, sx.Optimizer, sx.Checkpoint,
                sx.CheckpointManager, sx.InputContext):
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") or not callable(member):
                continue
            for p in list(inspect.signature(member).parameters)[1:]:
                out.add(f"{cls.__name__}.{name}:{p}")
    ctors = {"MirroredStrategy": sx.MirroredStrategy, "OneDeviceStrategy": sx.OneDeviceStrategy,
             "TPUStrategy": sx.TPUStrategy, "CentralStorageStrategy": sx.CentralStorageStrategy,
             "MultiWorkerMirroredStrategy": sx.MultiWorkerMirroredStrategy, "Variable": sx.Variable.__init__,
             "PerReplica": sx.PerReplica.__init__, "Mirrored": sx.Mirrored.__init__,
             "CommunicationOptions": sx.CommunicationOptions, "InputOptions": sx.InputOptions,
             "InputContext": sx.InputContext, "ValueContext": sx.ValueContext, "Optimizer": sx.Optimizer,
             "Checkpoint": sx.Checkpoint, "CheckpointManager": sx.CheckpointManager,
             "experimental_set_strategy": sx.experimental_set_strategy, "latest_checkpoint": sx.latest_checkpoint,
             "ReduceOp.parse": sx.ReduceOp.parse, "DeviceAssignment.build": DeviceAssignment.build,
             "range": sx.range}
    for name, fn in ctors.items():
        for p in inspect.signature(fn).parameters:
            if p != "self":
                out.add(f"{name}:{p}")
    return out


def test_every_public_argument_is_walked():
    walked = {f"{c.values[0]}:{c.values[1]}" for c in CASES}
    missing = sorted(_public_parameters() - walked - set(EXEMPT))
    assert not missing, f"public arguments no test walks: {missing}"
    assert not set(EXEMPT) & walked, "an exempt argument is walked: drop it from EXEMPT"


HOSTILE = json.loads((pathlib.Path(__file__).parent / "data/tf/gaps.json").read_text())["scenarios"]["hostile_inputs_r2"]["result"]


@pytest.mark.parametrize("call,recorded,names", [
    (lambda: S.run(lambda x: x, args=(np.array(["a", "b"]),)), "run_string_array", "argument `x` is a NumPy array of dtype <U1"),
    (lambda: S.run(lambda x: x, args=(np.array([W, 1], dtype=object),)), "run_object_array", "argument `x` is a NumPy array of dtype object"),
    (lambda: S.run(lambda x: x, args=(sx.PerReplica(["a", "b"]),)), "per_replica_of_strings", "argument `x` is a PerReplica whose component 0 is a Python str"),
    (lambda: S.run(lambda: {"s": "abc"}), "fn_returns_string", "returned a str ('abc') at `result['s']`"),
    (lambda: S.run(lambda: W), "fn_returns_object", "returned an object"),
    (lambda: S.run(lambda count: count + 1, args=(2 ** 40,)), "run_int_2_40", "argument `count` is the Python int 1099511627776"),
    (lambda: F(2 ** 40), "function_int_2_40", "argument `x` is the Python int 1099511627776"),
    (lambda: next(iter(S.experimental_distribute_dataset([{"s": np.array(["a", "b"])}]))), "dataset_of_strings",
     "holds an array of dtype <U1 at `['s']`"),
])
def test_values_no_program_holds_raise_naming_the_argument(call, recorded, names):
    # Intent: TensorFlow hands strings, Python objects and int64 values through eager
    # strategy.run (recorded); strategax compiles every call, so each raises a strategax error
    # naming the argument (or the result's path) and the fix, never JAX's own TypeError.
    assert "error" not in HOSTILE[recorded], HOSTILE[recorded]
    with pytest.raises((sx.DistributionTypeError, sx.DistributionValueError)) as e:
        call()
    assert names in str(e.value), str(e.value)
    assert "fix:" in str(e.value)
