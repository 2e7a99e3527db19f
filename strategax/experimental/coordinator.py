"""`sx.experimental.coordinator`: TensorFlow's `tf.distribute.experimental.coordinator`."""
from ..distribute.parameter_server import (ClosureCancelledError, ClusterCoordinator, ParameterServerLostError,
                                           PerWorkerValues, RemoteValue, WorkersLostError)

__all__ = ["ClosureCancelledError", "ClusterCoordinator", "ParameterServerLostError", "PerWorkerValues",
           "RemoteValue", "WorkersLostError"]
