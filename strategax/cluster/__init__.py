"""Where the workers of a multi-worker job are (cluster resolvers, TensorFlow's TF_CONFIG) and
this process's runtime among them (step bounds, liveness, lost-worker errors)."""
from .base import ClusterResolver, SimpleClusterResolver
from .cluster_spec import ClusterSpec
from .errors import ClusterConfigError, ClusterStartError
from .peers import Peers
from .ray import RayClusterResolver
from .ray_train import RayTrainClusterResolver, default_resolver
from .runtime import WorkerLostError, WorkerRuntime
from .startup import join
from .tf_config import TFConfigClusterResolver

__all__ = ["ClusterConfigError", "ClusterResolver", "ClusterSpec", "ClusterStartError", "Peers", "RayClusterResolver",
           "RayTrainClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver", "WorkerLostError",
           "WorkerRuntime", "default_resolver", "join"]
