"""`sx.experimental`: TensorFlow's `tf.distribute.experimental` names that strategax has:
`ParameterServerStrategy`, `coordinator` (ClusterCoordinator, RemoteValue, PerWorkerValues) and
`partitioners` (they live in `strategax.distribute.parameter_server`)."""
from ..distribute.parameter_server import ParameterServerStrategy
from ..variables import ShardedVariable
from . import coordinator, partitioners

__all__ = ["ParameterServerStrategy", "ShardedVariable", "coordinator", "partitioners"]
