"""Cluster resolvers: where the workers of a multi-worker job are (TensorFlow's TF_CONFIG)."""
from .base import ClusterResolver, SimpleClusterResolver
from .cluster_spec import ClusterSpec
from .errors import ClusterConfigError
from .tf_config import TFConfigClusterResolver

__all__ = ["ClusterConfigError", "ClusterResolver", "ClusterSpec", "SimpleClusterResolver",
           "TFConfigClusterResolver"]
