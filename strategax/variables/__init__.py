"""Variables (`sx.Variable` and the mirrored and sync-on-read kinds it becomes in a scope),
their storage on the replica mesh, the optimizer whose state lives in variables, and
checkpoints."""
from .checkpoint import Checkpoint, latest_checkpoint
from .enums import VariableAggregation, VariableSynchronization
from .optimizer import Optimizer
from .variables import MirroredVariable, SyncOnReadVariable, Variable

__all__ = ["Checkpoint", "MirroredVariable", "Optimizer", "SyncOnReadVariable", "Variable",
           "VariableAggregation", "VariableSynchronization", "latest_checkpoint"]
