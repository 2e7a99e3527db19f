"""One traced, optimised and lowered specialisation of a `strategy.function` (`_Compiled`):
its call (the arguments as global arrays, the batches taken from iterators, the padding gaps a
call meets) and its outputs read back (per-example rows kept lazily, padded outputs cut to
their real extents)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..backends import Executable
from ..backends.layout import ReplicaLayout
from ..errors import internal_stage
from ..ir import Module, TensorType
from ..passes.mask_padding import PaddedResult, gaps_raised, padded_results, padding_gap_error, padding_gaps
from .batches import Streams, per_example
from .batches.takes import InputPlan
from .distributed_values import Mirrored, PerReplica, PerReplicaBatch, is_distributed
from .extents import trim
from .inspection import MemoryStats
from .keys import key_data
from .kinds import Kind, KeyOutput, LocalOutput, Output, OutputEntry, StaticOutput, TakenOutput
from .signature import ARRAY, MIRRORED, PER_EXAMPLE, PER_REPLICA, SCALAR, Signature


@dataclass
class Traced:
    """What tracing a call gives: the optimised module and how to read its outputs back."""

    module: Module  # after the pass pipeline
    out_treedef: Any  # the result's pytree structure
    out_plan: list[OutputEntry]  # per output leaf: how it is read back from the program's outputs
    variables: list  # the variables the program reads or writes (extra inputs and outputs, in order)
    inputs: InputPlan | None  # the batches taken from iterator arguments (after the other inputs)
    whole: tuple  # the streams a `for` loop iterates to their end (their counts: in the cache key)


class _Compiled:
    """One traced, optimised and lowered specialisation of a StrategyFunction."""

    def __init__(self, traced: Traced, executable: Executable, sig: Signature, strategy):
        self.module, self.executable, self.out_treedef = traced.module, executable, traced.out_treedef
        self.out_plan, self.strategy = traced.out_plan, strategy
        variables = traced.variables
        self.dynamic = [i for i, k in enumerate(sig.kinds) if k is not Kind.STATIC]
        self.num_vars = len(variables)
        self.in_layouts = executable.in_layouts[:len(executable.in_layouts) - self.num_vars]
        self.inputs = traced.inputs  # batches from iterator arguments, after the others
        self.whole = traced.whole  # the streams a `for` loop iterates to their end (their counts: in the key)
        self.last_call = 0  # the detector's call number of the latest call (least recently used goes first)
        # each variable's buffer is an extra (donated) input and output, after the others
        self.var_slots = [(v._store, lay) for v, lay in
                          zip(variables, executable.in_layouts[len(self.in_layouts):])]
        self.fast_builds = 0  # FastCall shortcuts built for this specialization
        self.variables = list(variables)
        self.memory: MemoryStats | None = None  # once asked for (it needs XLA's compilation)
        self.gaps = padding_gaps(self.module)  # where rows are not followed: partial batches raise
        self.padded: dict[int, list[PaddedResult]] = {}  # result -> where its real extents come from
        for entry in padded_results(self.module):
            self.padded.setdefault(entry.result, []).append(entry)

    def check_gaps(self, sig: Signature) -> None:
        """Raise the error of the first gap this call meets: one where rows are not followed,
        for a call with a partial batch (an argument, or one taken from an iterator) or with
        values padded to one shape."""
        batches = [sig.batch] if sig.batch is not None else []
        if self.inputs is not None and sig.inputs is not None:
            for _, element in self.inputs.taken(sig):
                batches += [x for x in jax.tree_util.tree_leaves(element, is_leaf=is_distributed)
                            if isinstance(x, PerReplicaBatch)]
        padded = bool(sig.extents) or any(min(b.real_counts) < b.padded_rows for b in batches)
        uneven = bool(sig.extents) or any(len(set(b.real_counts)) > 1 for b in batches)
        met = gaps_raised(self.gaps, padded, uneven)
        if met:
            raise padding_gap_error(met, extents=bool(sig.extents))

    def global_args(self, sig: Signature) -> list:
        out = []
        for i, layout in zip(self.dynamic, self.in_layouts):
            x, kind = sig.leaves[i], sig.kinds[i]
            if kind == ARRAY:
                out.append(key_data(x))
            elif kind == SCALAR:  # a Python number traced as a value (reduce_retracing)
                out.append(np.asarray(x, layout.type.dtype))
            elif x.form.has_global and x.layout.mesh is layout.mesh:
                array = x.global_array
                if layout.logical_axes is not None and array.sharding != layout.sharding:
                    array = jax.device_put(array, layout.sharding)  # e.g. a batch split over logical devices
                out.append(array)
            elif kind == PER_REPLICA:
                array = layout.assemble(x.held_components())
                x.keep_global(array, layout)
                out.append(array)
            else:
                out.append(x.held_components()[0])
        if self.inputs is not None:
            out.extend(self.take_inputs(sig))
        out.extend(store.argument(layout) for store, layout in self.var_slots)
        return out

    def take_inputs(self, sig: Signature) -> list:
        """The batches this call takes from its iterator arguments, taken once per call."""
        if sig.inputs is None:
            assert self.inputs is not None, "a signature with iterator arguments has an input plan"
            sig.inputs, sig.site_elements = self.inputs.pull(host_streams(sig), self.in_layouts[len(self.dynamic):])
        return sig.inputs

    def _trimmed(self, entry: TakenOutput | LocalOutput, outs, sig: Signature, args: list):
        """A per-example output with the padded rows of its batch dropped (per_example.py): the
        whole output for a TakenOutput, one replica's component for a LocalOutput."""
        index, source = entry.index, entry.source
        array, layout = outs[index], self.executable.out_layouts[index]
        if source == per_example.BATCH:
            batch = sig.batch
        elif isinstance(source, int):  # the batch of the call's `source`-th single take
            batch = per_example.batch_of((sig.site_elements or [])[source])
        else:
            batch = None
        if batch is not None:
            value = per_example.trimmed(array, layout, batch)
        elif index in self.padded:
            value = self._cut(PER_REPLICA, index, outs, args)
        else:
            value = PerReplica.from_global(array, layout)
        return value if isinstance(entry, TakenOutput) else value.values[entry.replica]

    def is_cut(self, entry: OutputEntry) -> bool:
        """Whether `entry`'s output is cut to its real extents after the run (`_cut`): every padded
        one but a per-replica batch's rows, which PerReplicaBatch keeps lazily."""
        return isinstance(entry, Output) and entry.index in self.padded and not (
            entry.kind is PER_EXAMPLE and self.executable.out_layouts[entry.index].per_replica)

    def _cut(self, kind: Kind, index: int, outs, args):
        """Output `index` cut to its real extents (mask-padding's `padded_results`): each replica's
        component of a per-replica output, the one value of a replicated one."""
        array, layout = outs[index], self.executable.out_layouts[index]
        n = layout.num_replicas
        cuts: list[dict[int, int]] = [{} for _ in range(n)]
        for entry in self.padded[index]:
            counts = np.asarray(args[entry.index] if entry.source == "arg" else outs[entry.index]).reshape(-1)
            for r, c in enumerate(np.broadcast_to(counts, (n,))):
                cuts[r][entry.axis] = int(c)
        if layout.per_replica:
            return PerReplica([trim(c, cut) for c, cut in zip(PerReplica.from_global(array, layout).values, cuts)])
        assert all(cut == cuts[0] for cut in cuts), "mask-padding: a replicated output with differing extents"
        array = trim(array, cuts[0])
        if kind not in (PER_REPLICA, MIRRORED) or n == 1:
            return array
        return Mirrored.from_global(array, ReplicaLayout(layout.mesh, TensorType(array.shape, layout.type.dtype,
                                                                         layout.type.locality)))

    def executable_for(self, sig: Signature) -> Executable:
        """The program for the call of `sig` (its batches taken): the one holding its loops'
        steps and row counts as constants when it has them all, full; else the one reading them."""
        if self.executable.constants and not getattr(sig.inputs, "full", False):  # fewer steps, padded rows
            return self.executable.dynamic()
        return self.executable

    def __call__(self, sig: Signature):
        if self.inputs is not None and sig.inputs is None:
            self.take_inputs(sig)  # the iterators' input pipelines run the user's code: not wrapped
        with internal_stage("a compiled call", keep=(jax.errors.JaxRuntimeError,)):  # XLA's: out of memory...
            return self._call(sig)

    def _call(self, sig: Signature):
        args = self.global_args(sig)
        if self.gaps:
            self.check_gaps(sig)
        outs = self.strategy._execute(self.executable_for(sig), args)
        if self.num_vars:
            for (store, _), array in zip(self.var_slots, outs[len(outs) - self.num_vars:]):
                store.set(array)
        leaves = []
        for entry in self.out_plan:
            match entry:
                case StaticOutput(value=value):
                    leaves.append(value)
                case KeyOutput(index=index, impl=impl):
                    leaves.append(jax.random.wrap_key_data(outs[index], impl=impl))
                case TakenOutput() | LocalOutput():
                    leaves.append(self._trimmed(entry, outs, sig, args))
                case Output():
                    leaves.append(self._output(entry, outs, sig, args))
        return self.strategy._finalize_outputs(jax.tree_util.tree_unflatten(self.out_treedef, leaves))

    def _output(self, entry: Output, outs, sig: Signature, args: list):
        """Program output `entry.index` as the user gets it: cut to its real extents, a plain
        array with one replica (as TensorFlow hands it back), a distributed value otherwise."""
        kind, index = entry.kind, entry.index
        array, layout = outs[index], self.executable.out_layouts[index]
        if self.is_cut(entry):
            return self._cut(PER_REPLICA if kind is PER_EXAMPLE else kind, index, outs, args)
        if self.strategy.num_replicas_in_sync == 1 and kind is not PER_EXAMPLE:
            return array
        if layout.per_replica:
            if kind is not PER_EXAMPLE:
                return PerReplica.from_global(array, layout)
            return PerReplicaBatch.from_global_batch(array, layout, sig.batch.real_counts, sig.batch.count_value)
        if kind in (PER_REPLICA, MIRRORED, PER_EXAMPLE):
            return Mirrored.from_global(array, layout)
        return array


def loop_constants(traced: Traced, sig: Signature) -> dict[int, np.ndarray]:
    """Program argument -> value of each loop's steps count and row counts when a call has all
    its batches, full (`InputPlan.constants`): the program holds them as constants; a call
    whose iterator ran out mid-loop or whose batches have padded rows runs the program that
    reads them (`Executable.dynamic`)."""
    if traced.inputs is None:
        return {}
    offset = sum(k is not Kind.STATIC for k in sig.kinds)  # the plan's inputs follow the arguments
    return {offset + i: value for i, value in traced.inputs.constants().items()}


def host_streams(sig: Signature) -> Streams:
    """The host side of the call's input streams (made on first use, shared by trace and call)."""
    if sig.host is None:
        sig.host = Streams(sig.leaves)
    return sig.host
