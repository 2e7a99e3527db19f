"""Variables (`sx.Variable` and the mirrored and sync-on-read kinds it becomes in a scope),
their storage on the replica mesh, and the optimizer whose state lives in variables (its
slots named by their variable)."""
from .enums import VariableAggregation, VariableSynchronization
from .optimizer import Optimizer
from .sharded import ShardedVariable
from .variables import MirroredVariable, SyncOnReadVariable, Variable

__all__ = ["MirroredVariable", "Optimizer", "ShardedVariable", "SyncOnReadVariable", "Variable",
           "VariableAggregation", "VariableSynchronization"]
