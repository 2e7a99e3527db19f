"""Parameter-server training on Ray: `ParameterServerStrategy` (variables on parameter-server
actors, sharded by a partitioner), `ClusterCoordinator` (steps scheduled on worker actors,
asynchronously), `RemoteValue`, `PerWorkerValues`, the partitioners, and the named errors.
Ray is imported only when a strategy starts its actors."""
from .coordinator import ClusterCoordinator
from .errors import ClosureCancelledError, ParameterServerLostError, WorkersLostError
from .partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner, Partitioner
from .strategy import ParameterServerStrategy
from .values import PerWorkerDataset, PerWorkerIterator, PerWorkerValues, RemoteValue

__all__ = ["ClosureCancelledError", "ClusterCoordinator", "FixedShardsPartitioner", "MaxSizePartitioner",
           "MinSizePartitioner", "ParameterServerLostError", "ParameterServerStrategy", "Partitioner",
           "PerWorkerDataset", "PerWorkerIterator", "PerWorkerValues", "RemoteValue", "WorkersLostError"]
