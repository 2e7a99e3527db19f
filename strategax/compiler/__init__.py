"""The Strategy API, tracing and distributed values."""
from .central_storage import CentralStorageStrategy
from .context import (experimental_set_strategy, get_cross_replica_context, get_replica_context,
                      get_strategy, has_strategy, in_cross_replica_context)
from .default_strategy import DefaultStrategy
from .device_assignment import DeviceAssignment
from .distributed_values import DistributedValues, Mirrored, PerReplica
from .errors import DistributionRuntimeError, DistributionTypeError, DistributionValueError, StrategaxError
from .extended import StrategyExtended
from .function import StrategyFunction
from .importer import import_jaxpr
from .input import DistributedDataset
from .input_context import InputContext
from .multi_worker import MultiWorkerMirroredStrategy
from .multi_worker_runtime import WorkerLostError
from .options import CommunicationImplementation, CommunicationOptions, InputOptions
from .reduce_op import ReduceOp
from .replica_context import ReplicaContext
from .strategy import MirroredStrategy, OneDeviceStrategy, Strategy, ValueContext
from .tpu_strategy import TPUStrategy
from .var_enums import VariableAggregation, VariableSynchronization
from .variables import MirroredVariable, SyncOnReadVariable, Variable
from .checkpoint import Checkpoint, latest_checkpoint
from .optimizer import Optimizer

__all__ = [
    "CentralStorageStrategy", "CommunicationImplementation", "CommunicationOptions", "DefaultStrategy", "InputContext", "InputOptions", "DeviceAssignment", "DistributedDataset", "DistributedValues", "DistributionRuntimeError",
    "DistributionTypeError", "DistributionValueError", "Mirrored", "MirroredStrategy", "MultiWorkerMirroredStrategy",
    "OneDeviceStrategy", "PerReplica", "ReduceOp", "ReplicaContext", "StrategaxError", "Strategy",
    "StrategyExtended", "StrategyFunction", "TPUStrategy", "ValueContext", "WorkerLostError", "experimental_set_strategy",
    "get_cross_replica_context", "get_replica_context", "get_strategy", "has_strategy",
    "import_jaxpr", "in_cross_replica_context", "MirroredVariable", "SyncOnReadVariable", "Variable",
    "VariableAggregation", "VariableSynchronization", "Checkpoint", "latest_checkpoint", "Optimizer",
]
