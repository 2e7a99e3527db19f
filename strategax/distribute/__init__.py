"""The user's Strategy API: strategies, replica and cross-replica contexts, merge_call, the
extended API, logical devices, central storage and multi-worker strategies."""
from .central_storage import CentralStorageStrategy
from .context import (experimental_set_strategy, get_cross_replica_context, get_replica_context,
                      get_strategy, has_strategy, in_cross_replica_context)
from .default_strategy import DefaultStrategy
from .extended import StrategyExtended
from .multi_worker import MultiWorkerMirroredStrategy
from .options import CommunicationImplementation, CommunicationOptions
from .reduce_op import ReduceOp
from .replica_context import ReplicaContext
from .strategy import MirroredStrategy, OneDeviceStrategy, Strategy, ValueContext
from .tpu_strategy import DeviceAssignment, TPUStrategy

__all__ = [
    "CentralStorageStrategy", "CommunicationImplementation", "CommunicationOptions", "DefaultStrategy",
    "DeviceAssignment", "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy",
    "ReduceOp", "ReplicaContext", "Strategy", "StrategyExtended", "TPUStrategy", "ValueContext",
    "experimental_set_strategy", "get_cross_replica_context", "get_replica_context", "get_strategy",
    "has_strategy", "in_cross_replica_context",
]
