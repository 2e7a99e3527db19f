"""`sx.cluster_resolver`: the cluster resolvers, as in `tf.distribute.cluster_resolver`
(they live in `strategax.cluster`)."""
from .cluster import (ClusterConfigError, ClusterResolver, ClusterSpec, ClusterStartError, RayClusterResolver,
                      RayTrainClusterResolver, SimpleClusterResolver, TFConfigClusterResolver)

__all__ = ["ClusterConfigError", "ClusterResolver", "ClusterSpec", "ClusterStartError", "RayClusterResolver",
           "RayTrainClusterResolver", "SimpleClusterResolver", "TFConfigClusterResolver"]
