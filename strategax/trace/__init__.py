"""`strategy.function`'s machinery: trace a Python step (`jax.make_jaxpr`), import the jaxpr
into the IR, run the passes, lower with the JAX backend and run it on distributed values;
the variable session of a trace, the dump and the dataflow graph; statistics, memory,
profiles and the report's data (`inspection`); batches inside a function (`batches`:
`next(iterator)`, `for x in dataset`, `sx.range` loops, per-example outputs)."""
from .distributed_values import (DistributedValues, Mirrored, PerReplica, PerReplicaBatch, check_components,
                                 is_distributed, regroup)
from .function import StrategyFunction
from .importer import import_jaxpr
from .batches import range  # noqa: A004 - sx.range, like tf.range
from .inspection import MemoryStats, Profile, StepStats, profile
from .signature import TensorSpec
from .var_session import VarSession

__all__ = ["DistributedValues", "MemoryStats", "Mirrored", "PerReplica", "PerReplicaBatch", "Profile", "StepStats",
           "StrategyFunction", "TensorSpec", "VarSession", "check_components", "import_jaxpr", "is_distributed",
           "profile", "range", "regroup"]
